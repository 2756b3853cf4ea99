"""What the benchmark scripts of benchmarks/ import. A script (benchmarks/*.py) imports from here, never from
another script; a module here never imports a script (tests/benchmarks/test_scripts.py checks both).

- harness.py: the harness every script uses: `common_arguments` (`--threads`), `machine_facts` /
  `machine_summary` (the CPU, load and commit beside a figure), `round_robin`, `block_times`, `block_medians`
  (variants timed interleaved). Standard library only.
- decoding.py: SmolLM2-135M's config and checkpoint, the decode shapes, HF eager generation, the genai worker
  and builder, one ORT matrix-vector product, the streaming read bandwidth (bench_llama, bench_generate,
  bench_quant, bench_int4, bench_scale, the tvm_* scripts).
- training.py: the training workloads, their HF models, our step and torch eager's (bench_train,
  profile_train, profile_train_vs_torch, bench_update_pieces).
- checkpoints.py: random bf16 checkpoints at real shapes, written tensor by tensor (bench_scale,
  bench_genai_folder, scale_checkpoints, the llama.cpp row).
- tvm_step.py: one TVM decode step's options and feed (tvm_vm_calls, tvm_kernels_ab).
- cpu_variants.py, cpu_measure.py, cpu_compile_time.py, cpu_report.py: bench_cpu.py's parts.
- quant_variants.py, quant_llama.py: bench_quant.py's parts; fp32_products.py, llamacpp_bench.py,
  llamacpp_gguf.py: bench_int4.py's; llama_profile.py: bench_llama.py's and bench_quant.py's ORT profiles.

Run a script from anywhere: its own folder, benchmarks/, is first on `sys.path`, so `common` is found.
"""
