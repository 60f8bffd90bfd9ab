{
  "variables": {
    "cuda_home%": "<!(node scripts/find-nvcc.mjs --home)",
    "nvcc%": "<!(node scripts/find-nvcc.mjs)"
  },
  "targets": [
    {
      "target_name": "fa_cuda",
      "sources": [
        "csrc/binding.cc",
        "csrc/cp_binding.cc",
        "csrc/nccl_comm.cc",
        "csrc/cp_kernels.cu",
        "csrc/fa_api.cu",
        "csrc/fa_fwd_bf16.cu",
        "csrc/fa_fwd_f16.cu",
        "csrc/fa_bwd_bf16.cu",
        "csrc/fa_bwd_f16.cu",
        "csrc/fa_fwd_f32.cu",
        "csrc/fa_bwd_f32.cu",
        "csrc/fa_prep.cu",
        "csrc/fa_tma.cu",
        "csrc/fa_ffma.cu",
        "csrc/fa_kvcache.cu",
        "csrc/fa_kvcache_bf16.cu",
        "csrc/fa_kvcache_f16.cu",
        "csrc/fa_kvcache_f32.cu"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<(cuda_home)/include",
        "csrc"
      ],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-O2", "-DNDEBUG"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-std=gnu++20"],
      "libraries": ["-L<(cuda_home)/lib64", "-lcudart_static", "-ldl", "-lrt", "-lpthread"],
      "rules": [
        {
          "rule_name": "nvcc",
          "extension": "cu",
          "inputs": ["<(RULE_INPUT_PATH)", "<!@(node -p \"require('fs').readdirSync('csrc').filter(f => /\\.(cuh|h)$/.test(f)).map(f => 'csrc/' + f).join(' ')\")"],
          "outputs": ["<(INTERMEDIATE_DIR)/<(RULE_INPUT_ROOT).o"],
          "action": [
            "node", "scripts/nvcc-strict.mjs", "<(nvcc)", "-std=c++17", "-O3", "-DNDEBUG", "-Xcompiler", "-fPIC",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-gencode=arch=compute_80,code=sm_80",
            "-gencode=arch=compute_80,code=compute_80",
            "-Icsrc", "-c", "<(RULE_INPUT_PATH)", "-o", "<@(_outputs)"
          ],
          "message": "nvcc <(RULE_INPUT_PATH)",
          "process_outputs_as_sources": 1
        }
      ]
    }
  ]
}
