/* zorch_zero_options.h: the fields of zorch_zero_options (zorch_zero.h) that
   the Engine's options fill, one X-macro row each, generated from the schema
   lua/zorch/engine/options.lua by scripts/gen_options.lua (do not edit; a test
   fails when this file differs from the schema). A row is
     X(KIND, type, field, "Engine option", default, lo, hi, "must be", "doc")
   KIND (INT, INT64, DOUBLE, BOOL, DTYPE) says how a script's value is read;
   numbers must lie in [lo, hi]. */
#ifndef ZORCH_ZERO_OPTIONS_H
#define ZORCH_ZERO_OPTIONS_H
#include <float.h>
#include <math.h>

#define ZORCH_ZERO_OPTIONS(X) \
  X(INT, int, stage, "zero_stage", 0, 0, 3, "0, 1, 2 or 3", "0-3: what is partitioned across ranks (`docs/distributed.md`)") \
  X(DOUBLE, double, clip, "gradient_clipping", 0, 0, HUGE_VAL, "a number >= 0 (0 turns it off)", "max global L2 norm of the gradients; 0 is off. A DeepSpeed file without the key clips at 1.0, as DeepSpeed does") \
  X(INT, int, accumulation, "gradient_accumulation_steps", 1, 1, HUGE_VAL, "an integer >= 1", "micro-steps per optimizer step (DeepSpeed: any two of the three batch keys give the third)") \
  X(INT64, int64_t, bucket, "reduce_bucket_size", 500000000, 1, HUGE_VAL, "an integer >= 1", "elements per gradient reduction (stages 2-3)") \
  X(BOOL, bool, overlap, "overlap_comm", false, 0, 0, "true or false", "stages 2-3: a full bucket's reduction runs while backward goes on (`docs/distributed.md`, \"Overlap\")") \
  X(INT64, int64_t, max_reuse_distance, "max_reuse_distance", 0, 0, HUGE_VAL, "an integer >= 0", "stage 3: a module stays gathered from forward to backward when backward needs it within this many elements (0: released at once)") \
  X(INT64, int64_t, prefetch_bucket_size, "prefetch_bucket_size", 50000000, 0, HUGE_VAL, "an integer >= 0", "stage 3: elements of the next modules' parameters gathered ahead while the current one computes; 0: none") \
  X(INT64, int64_t, max_live_parameters, "max_live_parameters", 1000000000, 0, HUGE_VAL, "an integer >= 0", "stage 3: gathers ahead stop, and the gather pool keeps no more, beyond this many gathered elements") \
  X(DTYPE, zorch_dtype, dtype, "precision", ZORCH_F32, 0, 0, "\"fp32\", \"bf16\" or \"fp16\"", "`\"bf16\"` / `\"fp16\"`: 16-bit parameters and gradients, fp32 master weights and moments in the shards") \
  X(DOUBLE, double, loss_scale, "loss_scale", 0, 0, HUGE_VAL, "a number >= 0 (0: dynamic)", "fp16: a static loss scale; 0: dynamic") \
  X(INT, int, initial_scale_power, "initial_scale_power", 16, 0, 64, "an integer in 0..64", "fp16: the dynamic scale starts at 2^this") \
  X(INT, int, loss_scale_window, "loss_scale_window", 1000, 1, HUGE_VAL, "an integer >= 1", "fp16: good steps in a row after which the scale doubles") \
  X(INT, int, hysteresis, "hysteresis", 2, 1, HUGE_VAL, "an integer >= 1", "fp16: overflows absorbed before the scale halves") \
  X(BOOL, bool, consecutive_hysteresis, "consecutive_hysteresis", false, 0, 0, "true or false", "fp16: a good step restores the hysteresis") \
  X(DOUBLE, double, min_loss_scale, "min_loss_scale", 1, DBL_MIN, HUGE_VAL, "a number > 0", "fp16: the dynamic scale never falls below this") \
  X(BOOL, bool, check_grad_overflow, "check_grad_overflow", false, 0, 0, "true or false", "fp32 and bf16: a step whose gradients hold an inf or nan is skipped, as fp16's are (DeepSpeed's bf16 key)")

#endif
