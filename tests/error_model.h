// The error model the parity tests take their bounds from (tests/parity.h applies it). A layout
// computes the same operations as the one-process run on the same data; what differs is the
// association of fp32 sums: tensor parallel sums partial products and all-reduces them, FSDP
// reduce-scatters per-rank gradients, context parallel merges attention blocks, and a gemm given
// another row count or another ISA's vector width blocks its sums differently.
//
// Unit roundoff u = 2^-p for p significant bits, round to nearest: |fl(x) - x| <= u |x|, and two
// neighbouring numbers are up to 2u apart relative to them (subnormals aside):
//   fp32 2^-24, bf16 2^-8 (7 stored bits), e4m3 2^-4 (float8 / MXFP8 inputs and weights), e5m2
//   2^-3 (float8 / MXFP8 output gradients).
// Higham's gamma_n = n u / (1 - n u) bounds the error of an n-term sum in any association,
// relative to the sum of the terms' magnitudes: two associations of one sum differ by at most
// that much each.
//
// fp32 (mixed_precision fp32). The longest sum a layout reassociates in the parity models has
// K = 256 terms or fewer (model dims and FFN widths <= 128, vocabularies <= 131, 128 tokens per
// step; an all-reduce adds one term per rank), so every sum of a step moves by at most gamma_K =
// 1.53e-5 of its terms' magnitudes. The loss (a mean of positive cross-entropies), the validation
// loss and the gradient norm (a root of a sum of squares) are such sums of positive terms: they
// are held to gamma_K relative, every step. Nothing amplifies that across steps in fp32 while the
// run is stable: there is no narrow rounding for a last-bit difference to flip, and Adam's update
// m / sqrt(v) changes by the relative change of the element's gradients. An unstable run does
// amplify it (a step whose gradient norm doubles multiplies earlier differences by 10-100), so
// the parity models train at learning rates whose gradient norms stay smooth over the 10 steps. The parameters, element by element relative to
// max(|x|, the tensor's RMS): each step's update may differ by that step's gamma_K plus the
// difference the earlier steps left in the gradient it is computed from, so 2 gamma_K per step,
// added over the STEPS steps: 2 x 10 x 1.53e-5 = 3.05e-4.
//
// bf16, float8 (tensorwise, rowwise) and MXFP8 (mixed_precision bf16, 8-bit linears). Every
// compute copy, activation and gradient is narrowed. An fp32 difference of a few ulps in a value
// about to be narrowed moves it across a rounding boundary with probability about (fp32
// difference) / (narrow spacing): 2^-24 / 2^-7 = 2^-17 for bf16, 2^-24 / 2^-3 = 2^-21 for e4m3.
// A step of these models narrows 1e5-1e6 values, so such flips are expected within the first
// steps on any machine; each moves one element by a whole narrow spacing (2u: 2^-7 for bf16,
// 2^-3 for e4m3, 2^-2 for e5m2), 2^17-2^22 fp32 ulps, and the following steps feed it into new
// narrowings. From then on the layout and the reference are two runs of the same narrow
// arithmetic with different rounding noise: which elements differ, and from which step on, depends
// on each machine's fp32 blocking, so element-by-element parameter checks and "equal for the
// first N steps" are chaotic there and fail on one machine while passing on another.
// What is stable is the size of the narrow noise. Call D the distance of the narrow reference
// from the same model computed wide -- fp32 for bf16; bf16 without the 8-bit casts for float8
// and MXFP8 -- measured per statistic: the loss (the largest over the steps), the gradient
// norm likewise, the validation loss (its own distance or the loss's, the larger: one value's
// distance can be near 0 by chance), and each parameter tensor's relative RMS difference
// ||p - p_wide|| / ||p_wide||. The layout's run carries the same model of noise (the same
// operations, formats and number of narrowings), so it is about D from the wide run too, and by
// the triangle inequality within 2D of the reference; D is one sample of that noise, and a factor
// 2 more covers the spread between two samples: the layout must stay within A = 4 times D, plus
// the fp32 bound above for the sums that stay fp32. D is measured in the test, on the machine, by
// training the wide model beside the reference: the bound follows the machine's own narrow error,
// not numbers seen on one machine.
// Why a defect still fails: a layout bug in one tensor (a partial sum missing, the wrong shard,
// an update lost) moves that tensor's parameters by its whole update -- up to lr per step, about
// 1e-2 of its RMS per step here -- far beyond 4D; a gradient scaled by a constant hardly moves
// Adam's parameters, but moves the gradient norm by its share (1.5x on one tensor class: 5-27%,
// against bounds of 0.3% in bf16 and 1.3-3.3% in 8 bits). What these bounds cannot see is a change
// that is itself 8-bit noise of the same size: another choice of scales (each rank's own amax, a
// tp amax reduction left out) gives another quantisation of the same model, legitimately as far
// from the reference as the reference is from bf16. Those are checked exactly where they are
// deterministic: at the kernel (test_parity_f8's shard_vs_whole), and the trainer's handing every
// 8-bit linear its tp split by counting the reductions a step makes (tp_amax_reductions_wired).
#ifndef CT_ERROR_MODEL_H
#define CT_ERROR_MODEL_H

static const double ct_em_u_fp32 = 0x1p-24;
static const double ct_em_u_bf16 = 0x1p-8;
static const double ct_em_u_e4m3 = 0x1p-4;
static const double ct_em_u_e5m2 = 0x1p-3;

// gamma_n (see the top).
static inline double ct_em_gamma(double n, double u) { return n * u / (1 - n * u); }

// The longest fp32 sum a layout reassociates in the parity models.
enum { CT_EM_LONGEST_SUM = 256 };

// fp32: loss, validation loss and gradient norm, relative, every step.
static inline double ct_em_fp32_stat(void) { return ct_em_gamma(CT_EM_LONGEST_SUM, ct_em_u_fp32); }

// fp32: parameters after `steps` steps, element by element relative to max(|x|, tensor RMS).
static inline double ct_em_fp32_param(int steps) { return 2.0 * steps * ct_em_fp32_stat(); }

// Narrow precisions: how many times the reference's distance from the wide run (D) a layout
// may be from the reference (the triangle inequality, and the spread of D between two runs).
static const double ct_em_narrow_factor = 4.0;

// A narrow run's bound for a statistic whose reference is `d` (relative) from the wide run, over
// the fp32 bound `fp32` for the sums that stay in fp32.
static inline double ct_em_narrow(double d, double fp32) { return ct_em_narrow_factor * d + fp32; }

#endif
