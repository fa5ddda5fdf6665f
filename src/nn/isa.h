/*
 * One copy of nn/ per kernel set (core/cpu.h says how the set is chosen at run time).
 *
 * The Makefile compiles every .c file of src/nn/ once per set with SEQ_ISA = 0 (generic), 1 (avx2) or 2 (avx512),
 * the set's -march, and `-include nn/isa.h`, so this header comes first in each copy. It renames every
 * function nn/ exports to name_<set> (matmul_fused -> matmul_fused_avx2): the copies link side by side, a
 * call from one nn file to another stays inside its own set, and nn/dispatch.c defines the plain names,
 * which route each call to the active set. Code outside nn/ never sees SEQ_ISA and calls the plain names.
 *
 * Inside a copy, code picks its vector path with ISA_AVX512 / ISA_AVX2 (not __AVX512F__, which -march=native
 * also defines in the generic copy): the generic copy is the portable C code, vectorised by the compiler
 * for whatever the build's base -march allows.
 *
 * A new exported nn function needs a line here and one in dispatch.c; the linker reports a missing one
 * (three definitions of one name, or an undefined name_<set>).
 */
#ifndef SEQ_NN_ISA_H
#define SEQ_NN_ISA_H

#ifdef SEQ_ISA
#define ISA_GENERIC (SEQ_ISA == 0)
#define ISA_AVX2 (SEQ_ISA == 1)
#define ISA_AVX512 (SEQ_ISA == 2)
#if SEQ_ISA == 0
#define ISA_SUFFIX_ _generic
#elif SEQ_ISA == 1
#define ISA_SUFFIX_ _avx2
#elif SEQ_ISA == 2
#define ISA_SUFFIX_ _avx512
#else
#error "SEQ_ISA must be 0 (generic), 1 (avx2) or 2 (avx512)"
#endif
#define ISA_CAT2_(a, b) a##b
#define ISA_CAT_(a, b) ISA_CAT2_(a, b)
#define ISA_FN(f) ISA_CAT_(f, ISA_SUFFIX_)

// activation.c
#define gelu_forward ISA_FN(gelu_forward)
#define gelu_backward ISA_FN(gelu_backward)
#define relu_forward ISA_FN(relu_forward)
#define relu_backward ISA_FN(relu_backward)
#define silu_forward ISA_FN(silu_forward)
#define silu_backward ISA_FN(silu_backward)
#define swiglu_forward ISA_FN(swiglu_forward)
#define swiglu_backward ISA_FN(swiglu_backward)
#define residual_forward ISA_FN(residual_forward)
#define residual_backward ISA_FN(residual_backward)
#define zero_fill ISA_FN(zero_fill)
// adamw.c
#define adamw_update ISA_FN(adamw_update)
// attention.c, attention_backward.c
#define alibi_slopes ISA_FN(alibi_slopes)
#define attn_opts_default ISA_FN(attn_opts_default)
#define attention_forward ISA_FN(attention_forward)
#define attention_backward ISA_FN(attention_backward)
#define attention_backward_write ISA_FN(attention_backward_write)
#define attention_probs ISA_FN(attention_probs)
// bla.c
#define bla_coeffs ISA_FN(bla_coeffs)
#define bla_work_size ISA_FN(bla_work_size)
#define bla_ckpt_size ISA_FN(bla_ckpt_size)
#define bla_state_size ISA_FN(bla_state_size)
#define bla_state_init ISA_FN(bla_state_init)
#define bla_forward ISA_FN(bla_forward)
#define bla_backward ISA_FN(bla_backward)
#define bla_step ISA_FN(bla_step)
// attention_step.c
#define attention_step ISA_FN(attention_step)
// blockdiag.c
#define blockdiag_forward ISA_FN(blockdiag_forward)
#define blockdiag_backward ISA_FN(blockdiag_backward)
// conv.c
#define conv1d_causal_forward ISA_FN(conv1d_causal_forward)
#define conv1d_causal_backward ISA_FN(conv1d_causal_backward)
#define conv1d_causal_step ISA_FN(conv1d_causal_step)
// delta.c
#define delta_state_size ISA_FN(delta_state_size)
#define delta_ckpt_size ISA_FN(delta_ckpt_size)
#define delta_state_init ISA_FN(delta_state_init)
#define delta_forward ISA_FN(delta_forward)
#define delta_backward ISA_FN(delta_backward)
#define delta_step ISA_FN(delta_step)
// embedding.c
#define embedding_check_ids ISA_FN(embedding_check_ids)
#define embedding_forward ISA_FN(embedding_forward)
#define embedding_backward ISA_FN(embedding_backward)
// groupnorm.c
#define groupnorm_forward ISA_FN(groupnorm_forward)
#define groupnorm_backward ISA_FN(groupnorm_backward)
// heads.c
#define heads_split ISA_FN(heads_split)
#define heads_merge ISA_FN(heads_merge)
// kalman.c
#define kalman_ckpt_size ISA_FN(kalman_ckpt_size)
#define kalman_scratch_size ISA_FN(kalman_scratch_size)
#define kalman_scan_forward ISA_FN(kalman_scan_forward)
#define kalman_scan_backward ISA_FN(kalman_scan_backward)
#define kalman_state_init ISA_FN(kalman_state_init)
#define kalman_step ISA_FN(kalman_step)
#define kalman_attention_matrix ISA_FN(kalman_attention_matrix)
// linrec.c
#define linrec_state_size ISA_FN(linrec_state_size)
#define linrec_ckpt_size ISA_FN(linrec_ckpt_size)
#define linrec_state_init ISA_FN(linrec_state_init)
#define linrec_forward ISA_FN(linrec_forward)
#define linrec_backward ISA_FN(linrec_backward)
#define linrec_step ISA_FN(linrec_step)
// matmul.c
#define matmul ISA_FN(matmul)
#define matmul_fused ISA_FN(matmul_fused)
#define matmul_forward ISA_FN(matmul_forward)
#define matmul_backward ISA_FN(matmul_backward)
// norm.c
#define layernorm_forward ISA_FN(layernorm_forward)
#define layernorm_backward ISA_FN(layernorm_backward)
#define l2norm_forward ISA_FN(l2norm_forward)
#define l2norm_backward ISA_FN(l2norm_backward)
#define rmsnorm_forward ISA_FN(rmsnorm_forward)
#define rmsnorm_backward ISA_FN(rmsnorm_backward)
// path_attn.c
#define path_attn_forward ISA_FN(path_attn_forward)
#define path_attn_backward ISA_FN(path_attn_backward)
#define path_attn_step ISA_FN(path_attn_step)
// selrope.c
#define selrope_chain_state_size ISA_FN(selrope_chain_state_size)
#define selrope_angles ISA_FN(selrope_angles)
#define selrope_angles_work_size ISA_FN(selrope_angles_work_size)
#define selrope_angles_backward ISA_FN(selrope_angles_backward)
#define selrope_rotate ISA_FN(selrope_rotate)
#define selrope_rotate_backward ISA_FN(selrope_rotate_backward)
// rotary.c
#define rotary_cfg_default ISA_FN(rotary_cfg_default)
#define rotary_sc_bank ISA_FN(rotary_sc_bank)
#define rotary_table_init ISA_FN(rotary_table_init)
#define rotary_table_free ISA_FN(rotary_table_free)
#define rotary_forward ISA_FN(rotary_forward)
#define rotary_backward ISA_FN(rotary_backward)
#define rotary_forward_table ISA_FN(rotary_forward_table)
#define rotary_backward_table ISA_FN(rotary_backward_table)
#define rotary_forward_heads_table ISA_FN(rotary_forward_heads_table)
#define rotary_backward_heads_table ISA_FN(rotary_backward_heads_table)
// xent.c
#define crossentropy_check_targets ISA_FN(crossentropy_check_targets)
#define crossentropy_forward ISA_FN(crossentropy_forward)
#define crossentropy_backward ISA_FN(crossentropy_backward)
#define crossentropy_backward_inplace ISA_FN(crossentropy_backward_inplace)
#define crossentropy_forward_backward ISA_FN(crossentropy_forward_backward)
#endif  // SEQ_ISA

#endif
