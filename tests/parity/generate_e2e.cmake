# `quartet generate` end to end against Hugging Face (tests/mpi/CMakeLists.txt registers it):
# run it under mpirun on the reference model, then check tokens, text and logits in Python.
# Variables: MPIRUN (words joined by '|'), QUARTET, PYTHON, SOURCE_DIR, DIR (the fixture's);
# FAMILIES (optional): the reference is in DIR/<family> for each, and has no expected_min.jsonl.
string(REPLACE "|" ";" MPIRUN "${MPIRUN}")

# quartet generate on MODEL_DIR's model (MODEL_DIR/<MODEL>, default model) and prompts into
# MODEL_DIR/<OUT>, with the deck settings SETS, checked by check_generate.py against
# MODEL_DIR/<EXPECTED> (and, with LOGITS, HF's logits); WHAT names the run in failures.
function(generate_matches MODEL_DIR)
  cmake_parse_arguments(ARG "LOGITS" "OUT;EXPECTED;WHAT;MODEL" "SETS" ${ARGN})
  if(NOT ARG_MODEL)
    set(ARG_MODEL model)
  endif()
  set(out ${MODEL_DIR}/${ARG_OUT})
  file(REMOVE_RECURSE ${out})
  set(logits_out)
  set(logits_check)
  if(ARG_LOGITS)
    set(logits_out --logits ${out}/logits.h5)
    set(logits_check ${MODEL_DIR}/${ARG_MODEL} ${out}/logits.h5)
  endif()
  execute_process(
    COMMAND ${MPIRUN} ${QUARTET} generate ${SOURCE_DIR}/tests/decks/generate.deck
            --set model.actor.path=${MODEL_DIR}/${ARG_MODEL} --set rollout.prompts=${MODEL_DIR}/prompts.jsonl
            --set run.out=${out} ${ARG_SETS} ${logits_out}
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "quartet generate (${ARG_WHAT}) on ${MODEL_DIR} exited with ${rc}")
  endif()
  execute_process(
    COMMAND ${PYTHON} ${SOURCE_DIR}/tests/parity/check_generate.py ${MODEL_DIR}/${ARG_EXPECTED}
            ${out}/generations.jsonl ${logits_check}
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generations (${ARG_WHAT}) of ${MODEL_DIR} differ from Hugging Face")
  endif()
endfunction()

if(FAMILIES)
  foreach(family ${FAMILIES})
    generate_matches(${DIR}/${family} OUT out EXPECTED expected.jsonl WHAT "greedy and sampled" LOGITS)
  endforeach()
  return()
endif()
generate_matches(${DIR} OUT out EXPECTED expected.jsonl WHAT "greedy and sampled" LOGITS)
# Stop tokens with min_new_tokens (make_generate_model.py's STOPS and MIN_NEW_TOKENS): until then
# no stop token may be picked, as in HF's min_new_tokens.
generate_matches(${DIR} OUT out_min EXPECTED expected_min.jsonl WHAT "min_new_tokens"
                 SETS --set rollout.stop=9,1 --set rollout.min_new_tokens=6)
# A model whose config.json and generation_config.json list several eos_token_ids (as Llama 3
# and Qwen ship them): quartet stops at each, as HF's generate does, without rollout.stop.
generate_matches(${DIR} MODEL model_eos OUT out_eos EXPECTED expected_eos.jsonl WHAT "eos_token_id lists")
# The same with continuous batching over a paged cache: one row in flight (the batch's other
# prompt waits for it) and blocks of three slots (prompts split across blocks), min_new_tokens kept
# row by row.
generate_matches(${DIR} OUT out_paged EXPECTED expected_min.jsonl WHAT "min_new_tokens, paged"
                 SETS --set rollout.stop=9,1 --set rollout.min_new_tokens=6 --set rollout.decode_rows=1
                      --set rollout.kv_block=3)
