# `quartet generate` end to end against Hugging Face (tests/mpi/CMakeLists.txt registers it):
# run it under mpirun on the reference model, then check tokens, text and logits in Python.
# Variables: MPIRUN (words joined by '|'), QUARTET, PYTHON, SOURCE_DIR, DIR (the fixture's).
string(REPLACE "|" ";" MPIRUN "${MPIRUN}")
file(REMOVE_RECURSE ${DIR}/out)
execute_process(
  COMMAND ${MPIRUN} ${QUARTET} generate ${SOURCE_DIR}/tests/decks/generate.deck
          --set model.actor.path=${DIR}/model --set rollout.prompts=${DIR}/prompts.jsonl
          --set run.out=${DIR}/out --logits ${DIR}/out/logits.h5
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "quartet generate exited with ${rc}")
endif()
execute_process(
  COMMAND ${PYTHON} ${SOURCE_DIR}/tests/parity/check_generate.py ${DIR}/expected.jsonl
          ${DIR}/out/generations.jsonl ${DIR}/model ${DIR}/out/logits.h5
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generations or logits differ from Hugging Face")
endif()
