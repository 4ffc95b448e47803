#!/bin/sh
# collect name repo path
set -e
M=${MIRROR:?set MIRROR to a folder of bare clones named owner+name/repo}
OUT=$(dirname "$0")
TSV=$OUT/sources.tsv
c() {
  name=$1; repo=$2; path=$3
  d=$M/$(echo $repo | tr / +)/repo
  commit=$(git -C $d log -1 --format=%H HEAD -- "$path")
  git -C $d show "HEAD:$path" > "$OUT/$name"
  printf '%s\t%s\t%s\t%s\n' "$name" "$repo" "$path" "$commit" >> $TSV
}
printf 'file\trepository\tpath\tcommit\n' > $TSV
A=huggingface/accelerate
c accelerate-zero_stage1.json $A examples/deepspeed_config_templates/zero_stage1_config.json
c accelerate-zero_stage2.json $A examples/deepspeed_config_templates/zero_stage2_config.json
c accelerate-zero_stage2_offload.json $A examples/deepspeed_config_templates/zero_stage2_offload_config.json
c accelerate-zero_stage3.json $A examples/deepspeed_config_templates/zero_stage3_config.json
c accelerate-zero_stage3_offload.json $A examples/deepspeed_config_templates/zero_stage3_offload_config.json
c accelerate-tests-zero2.json $A tests/deepspeed/ds_config_zero2.json
c accelerate-tests-zero3.json $A tests/deepspeed/ds_config_zero3.json
c accelerate-tests-zero2_model_only.json $A tests/deepspeed/ds_config_zero2_model_only.json
c accelerate-tests-zero3_model_only.json $A tests/deepspeed/ds_config_zero3_model_only.json
c sp-alst.ds-config.json $A examples/alst_ulysses_sequence_parallelism/sp-alst.ds-config.json
c accelerate-deepspeed.yaml $A examples/config_yaml_templates/deepspeed.yaml
c accelerate-sp-alst.accelerate-config.yml $A examples/alst_ulysses_sequence_parallelism/sp-alst.accelerate-config.yml
L=haotian-liu/LLaVA
c llava-zero2.json $L scripts/zero2.json
c llava-zero3.json $L scripts/zero3.json
c llava-zero3_offload.json $L scripts/zero3_offload.json
X=axolotl-ai-cloud/axolotl
for f in zero1 zero1_torch_compile zero2 zero2_torch_compile zero3 zero3_bf16 zero3_bf16_cpuoffload_all zero3_bf16_cpuoffload_params; do
  c axolotl-$f.json $X deepspeed_configs/$f.json
done
F=hiyouga/LLaMA-Factory
for f in ds_z0_config ds_z2_autotp_config ds_z2_config ds_z2_offload_config ds_z3_config ds_z3_fp8_config ds_z3_offload_config; do
  c llamafactory-$f.json $F examples/deepspeed/$f.json
done
c fastchat-deepspeed_config_s2.json lm-sys/FastChat playground/deepspeed_config_s2.json
c fastchat-deepspeed_config_s3.json lm-sys/FastChat playground/deepspeed_config_s3.json
c alpaca-default_offload_opt_param.json tatsu-lab/stanford_alpaca configs/default_offload_opt_param.json
O=LAION-AI/Open-Assistant
for f in deepspeed_rl deepspeed_rl_zero3 zero3_config_falcon zero3_config_pretrain zero3_config_sft zero_config zero_config_pretrain zero_config_sft_65b; do
  c openassistant-$f.json $O model/model_training/configs/$f.json
done
c openassistant-accelerate_config.yaml $O model/model_training/configs/accelerate_config.yaml
B=bigscience-workshop/Megatron-DeepSpeed
for f in ds_config ds_config_bf16 ds_config_cl; do c bigscience-$f.json $B tests/$f.json; done
G=microsoft/Megatron-DeepSpeed
c megatronds-finetune_hf_llama.json $G examples_deepspeed/finetune_hf_llama/ds_config.json
c megatronds-universal_checkpointing.json $G examples_deepspeed/universal_checkpointing/ds_config.json
c megatronds-cl_baseline.json $G examples_deepspeed/curriculum_learning/ds_zero_stage_1_config_baseline.json
D=microsoft/DeepSpeed
for f in ds_config_func_bs4_zero1 ds_config_func_bs4_zero2 ds_config_func_bs4_zero2_offload ds_config_func_bs8_no_zero ds_config_func_bs8_zero0_gas3 ds_config_func_bs8_zero2_gas3 ds_config_func_scheduler ds_config_perf_bs16; do
  c deepspeed-gpt2-$f.json $D tests/model/Megatron_GPT2/$f.json
done
for f in deepspeed_bsz24_fp16_config deepspeed_bsz24_fp16_eigenvalue_quantize_config deepspeed_bsz24_fp16_zero2_config deepspeed_bsz24_fp32_config; do
  c deepspeed-squad-$f.json $D tests/model/BingBertSquad/$f.json
done
c deepspeed-torch_compile_z2.json $D tests/torch_compile/ds_config_z2.json
c deepspeed-torch_compile_z3.json $D tests/torch_compile/ds_config_z3.json
c deepspeed-accelerator.json $D tests/accelerator/ds_config.json
c deepspeed-hybrid_engine.json $D tests/hybrid_engine/hybrid_engine_config.json
c deepspeed-autotuning_zero3.json $D deepspeed/autotuning/config_templates/template_zero3.json
E=microsoft/DeepSpeedExamples
c dsexamples-compression_cifar.json $E compression/cifar/config/ds_config.json
c dsexamples-imagenet.json $E training/imagenet/config/ds_config.json
c dsexamples-imagenet_fp16_z1.json $E training/imagenet/config/ds_fp16_z1_config.json
c dsexamples-gan.json $E training/gan/gan_deepspeed_config.json
c dsexamples-pipeline.json $E training/pipeline_parallelism/ds_config.json
c dsexamples-squad_bsz24.json $E training/BingBertSquad/deepspeed_bsz24_config.json
c dsexamples-squad_onebitadam.json $E training/BingBertSquad/1-bit_adam/nccl/deepspeed_onebitadam_bsz96_config.json
c dsexamples-bert_01adam.json $E training/bing_bert/01_adam/nccl/deepspeed_bsz4k_01adam_config_seq128_nccl.json
c dsexamples-bert_onebitlamb.json $E training/bing_bert/1-bit_lamb/nccl/deepspeed_bsz64k_onebitlamb_config_seq128_nccl.json
c dsexamples-bert_lamb_seq512.json $E training/bing_bert/deepspeed_bsz32k_lamb_config_seq512.json
c dsexamples-bert_pld.json $E training/bing_bert/deepspeed_bsz4k_progressive_layer_drop_config_seq128.json
c dsexamples-autotuning_fp16_z2.json $E training/autotuning/hf/dsconfigs/ds_config_fp16_z2.json
c dsexamples-autotuning_z3.json $E training/autotuning/hf/dsconfigs/ds_config_z3.json
c dsexamples-compression_bert_W1A8.json $E compression/bert/config/ds_config_W1A8_Qgroup64_fp16.json
c dsexamples-compression_cifar_prune.json $E compression/cifar/config/ds_config_channel_prune.json
c dsexamples-compression_gpt2_W8A8.json $E compression/gpt2/config/ds_config_W8A8_Qgroup64_fp32.json
c dsexamples-random_ltd_gpt.json $E training/data_efficiency/gpt_finetuning/config/ds_config_gpt_base_random_ltd.json
c dsexamples-random_ltd_vit.json $E training/data_efficiency/vit_finetuning/config/ds_config_cifar_random_ltd.json
T=huggingface/trl
for f in deepspeed_zero1 deepspeed_zero2 deepspeed_zero3; do c trl-$f.yaml $T examples/accelerate_configs/$f.yaml; done
c trl-tests-zero2.yaml $T tests/distributed/data/accelerate_configs/zero2.yaml
c alignment-handbook-zero3.yaml huggingface/alignment-handbook recipes/accelerate_configs/zero3.yaml
