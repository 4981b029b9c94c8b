"""The tables of derivations/config/megatron.py: which Megatron-LM flags change no memory memsym models, and
the names Megatron gives what memsym maps (NVIDIA/Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553)."""
from __future__ import annotations

#: Flags that change none of the memory memsym models (read by no mapping, never warned about).
IGNORED = frozenset("""
--distributed-timeout-minutes --use-mcore-models --disable-bias-linear --train-iters --train-samples
--exit-duration-in-mins --exit-interval --no-check-for-nan-in-loss-and-grad --manual-gc --manual-gc-interval
--data-cache-path --data-path --vocab-file --merge-file --split --kv-channels --max-position-embeddings
--position-embedding-type --rotary-base --normalization --norm-epsilon --mtp-loss-scaling-factor --attention-dropout
--hidden-dropout --clip-grad --weight-decay --qk-layernorm --lr-warmup-fraction --lr --min-lr --lr-decay-style
--adam-beta1 --adam-beta2 --adam-eps --moe-router-pre-softmax --moe-aux-loss-coeff --moe-router-topk-scaling-factor
--moe-router-bias-update-rate --rotary-scaling-factor --mscale --mscale-all-dim --eval-iters --eval-interval --save
--load --save-interval --init-method-std --log-timers-to-tensorboard --log-memory-to-tensorboard
--log-num-zeros-in-grad --log-params-norm --log-validation-ppl-to-tensorboard --log-throughput --log-interval
--logging-level --tensorboard-dir --async-save --use-persistent-ckpt-worker
--no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers
--lr-decay-samples --lr-warmup-samples --lr-warmup-init --auto-detect-ckpt-format --save-retain-interval
--dist-ckpt-strictness --wandb-project --wandb-entity --wandb-exp-name --wandb-save-dir --enable-experimental
--deterministic-mode --ckpt-format --no-gradient-accumulation-fusion --megatron-fsdp-grad-comm-dtype
--outer-dp-sharding-strategy --multi-latent-attention --swiglu --moe-router-num-groups --moe-router-group-topk
--moe-router-score-function --moe-router-enable-expert-bias --moe-grouped-gemm --moe-permute-fusion
--cross-entropy-fusion-impl --tokenizer-model --seed --lr-decay-iters --lr-warmup-iters --tokenizer-type
--eval-micro-batch-size --log-straggler --tensorboard-log-interval --ckpt-fully-parallel-save
--ckpt-fully-parallel-load --ckpt-assume-constant-structure --use-dist-ckpt --dataloader-type --mock-data
--moe-router-load-balancing-type --moe-z-loss-coeff --rotary-percent --use-rotary-position-embeddings
--no-bias-dropout-fusion --no-masked-softmax-fusion --no-bias-gelu-fusion --bias-swiglu-fusion --apply-layernorm-1p
--untie-embeddings-and-output-weights --moe-layer-freq --dist-ckpt-optim-fully-reshardable --te-rng-tracker
--micro-batch-size --global-batch-size --seq-length --tensor-model-parallel-size --pipeline-model-parallel-size
""".split())
#: GPT-2's BPE vocabulary (vocab.json of gpt2, as the functional tests' bpe/vocab.json): 50,257 tokens.
GPT2_VOCAB = 50257
#: Tokenizer models memsym knows the size of by name (the file itself is never opened): an assumption each.
KNOWN_TOKENIZER_MODELS = {"nemotron_2_256k.model": (256000, "the name says 256k: taken as 256,000 tokens")}
#: Megatron's --recompute-modules and the memsym operators each recomputes (TC recompute_modules).
RECOMPUTE_MODULES = {"core_attn": ("score",), "layernorm": ("norm",), "mla_up_proj": ("mla_up",), "mlp": ("ffn",),
                     "moe_act": ("swiglu",), "shared_experts": ("shared",), "moe": ("router", "experts", "shared")}
#: --data-parallel-sharding-strategy of Megatron-FSDP -> memsym's ZeRO stage (ARGS _add_distributed_args).
FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
DTYPE_NAMES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}

#: Megatron's overlap flags and the step time's switch each sets (derivations/steptime/evaluate.py OVERLAP_SWITCHES;
#: ARGS: all off by default)
OVERLAP_FLAGS = (("--overlap-grad-reduce", "grad-reduce"), ("--overlap-param-gather", "param-gather"),
                 ("--overlap-moe-expert-parallel-comm", "ep"), ("--tp-comm-overlap", "tp"),
                 ("--delay-wgrad-compute", "wgrad"))
