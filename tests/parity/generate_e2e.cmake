# `quartet generate` end to end against Hugging Face (tests/mpi/CMakeLists.txt registers it):
# run it under mpirun on the reference model, then check tokens, text and logits in Python.
# Variables: MPIRUN (words joined by '|'), QUARTET, PYTHON, SOURCE_DIR, DIR (the fixture's);
# FAMILIES (optional): the reference is in DIR/<family> for each, and has no expected_min.jsonl.
string(REPLACE "|" ";" MPIRUN "${MPIRUN}")

function(generate_matches MODEL_DIR)
  file(REMOVE_RECURSE ${MODEL_DIR}/out)
  execute_process(
    COMMAND ${MPIRUN} ${QUARTET} generate ${SOURCE_DIR}/tests/decks/generate.deck
            --set model.actor.path=${MODEL_DIR}/model --set rollout.prompts=${MODEL_DIR}/prompts.jsonl
            --set run.out=${MODEL_DIR}/out --logits ${MODEL_DIR}/out/logits.h5
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "quartet generate on ${MODEL_DIR} exited with ${rc}")
  endif()
  execute_process(
    COMMAND ${PYTHON} ${SOURCE_DIR}/tests/parity/check_generate.py ${MODEL_DIR}/expected.jsonl
            ${MODEL_DIR}/out/generations.jsonl ${MODEL_DIR}/model ${MODEL_DIR}/out/logits.h5
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generations or logits of ${MODEL_DIR} differ from Hugging Face")
  endif()
endfunction()

if(FAMILIES)
  foreach(family ${FAMILIES})
    generate_matches(${DIR}/${family})
  endforeach()
  return()
endif()
generate_matches(${DIR})
# Stop tokens with min_new_tokens (make_generate_model.py's STOPS and MIN_NEW_TOKENS): until then
# no stop token may be picked, as in HF's min_new_tokens.
function(min_new_tokens_matches OUT WHAT)
  file(REMOVE_RECURSE ${DIR}/${OUT})
  execute_process(
    COMMAND ${MPIRUN} ${QUARTET} generate ${SOURCE_DIR}/tests/decks/generate.deck
            --set model.actor.path=${DIR}/model --set rollout.prompts=${DIR}/prompts.jsonl
            --set run.out=${DIR}/${OUT} --set rollout.stop=9,1 --set rollout.min_new_tokens=6 ${ARGN}
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "quartet generate (${WHAT}) exited with ${rc}")
  endif()
  execute_process(
    COMMAND ${PYTHON} ${SOURCE_DIR}/tests/parity/check_generate.py ${DIR}/expected_min.jsonl
            ${DIR}/${OUT}/generations.jsonl
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generations with stop tokens and min_new_tokens (${WHAT}) differ from Hugging Face")
  endif()
endfunction()
min_new_tokens_matches(out_min "min_new_tokens")
# The same with continuous batching over a paged cache: one row in flight (the batch's other
# prompt waits for it) and blocks of three slots (prompts split across blocks), min_new_tokens kept
# row by row.
min_new_tokens_matches(out_paged "paged" --set rollout.decode_rows=1 --set rollout.kv_block=3)
