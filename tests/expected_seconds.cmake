# The longest tests' seconds under `make test` on 2 cores, measured, as ctest's COST: ctest starts
# the costliest first. After a run ctest keeps timings of its own (Testing/Temporary/
# CTestCostData.txt) and orders by those; a fresh build has none, and in test order its longest
# tests started last and drew the suite out. quartet_expect_seconds() applies the list to the
# tests of the directory that calls it (a test's properties belong to its directory).
set(QUARTET_EXPECTED_SECONDS
  model_refusals 114  io_export_families 84  postprocess_unittest 69  hf_paths 55
  generate_families_match_hf 51  sft_resume 44  train_reward_retokenize 44  sharded_h5_np4 43
  model_np1 42  train_resume_eval 40  sharded_np4 38  checkpoint_identity_refused 38
  train_eval_demo 35  train_watchdog_names_a_stopped_rank 34  data_prepared_pairs 33
  train_resume_launch_double 30  train_math_reward_rises 30  slurm_train_checkpoint_requeue_resume 29
  train_resume_launch 29  data_prepared_prompts 29  generate_matches_hf 29  train_colocated_np8 29
  train_recipe_dual_clip_ppo_reward_rises 28  io_export_trained_run 28  train_resume_reshard 28
  rm_resume 26  gpu_gptj6b_plumbing_tiny_cpu 26  train_resume_time_limit 26)

function(quartet_expect_seconds)
  set(pairs ${QUARTET_EXPECTED_SECONDS})
  while(pairs)
    list(POP_FRONT pairs name seconds)
    if(TEST ${name})
      set_tests_properties(${name} PROPERTIES COST ${seconds})
    endif()
  endwhile()
endfunction()
