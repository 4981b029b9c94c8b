#!/bin/bash
# A DeepSeek-V3-shaped proxy as people launch it: variables, arrays, continuations, torchrun.
set -euo pipefail
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NNODES=2
TP=2
PP=${PP:-2}
export CUDA_DEVICE_MAX_CONNECTIONS=1
CHECKPOINT_PATH=/ckpt/$RUN_NAME   # RUN_NAME is never set: only --save reads it

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
)
MODEL_ARGS=(
    --num-layers 8                # 2 dense + 6 MoE
    --hidden-size 512
    --ffn-hidden-size 1536
    --num-attention-heads 8
    --multi-latent-attention
    --q-lora-rank 256 --kv-lora-rank 128
    --qk-head-dim 64 --qk-pos-emb-head-dim 32 --v-head-dim 64
    --swiglu
    --untie-embeddings-and-output-weights
)
MOE_ARGS=(
    --num-experts 16
    --moe-layer-freq "([0]*2+[1]*6)"
    --moe-ffn-hidden-size 256
    --moe-shared-expert-intermediate-size 512
    --moe-router-topk 4
    --moe-router-score-function sigmoid
    --moe-router-enable-expert-bias
    --moe-token-dispatcher-type alltoall
)
MOE_ARGS+=(--expert-model-parallel-size 4)

torchrun "${DISTRIBUTED_ARGS[@]}" pretrain_gpt.py \
    "${MODEL_ARGS[@]}" "${MOE_ARGS[@]}" \
    --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size $PP \
    --sequence-parallel --use-distributed-optimizer \
    --micro-batch-size 2 --global-batch-size 64 --seq-length 2048 \
    --vocab-size 1000 --make-vocab-size-divisible-by 128 \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
    --bf16 --save "$CHECKPOINT_PATH" --lr 1e-4 2>&1 | tee train.log
