// Parallel regions that would get one thread run inline, with no libgomp team (omp_inline.c):
// libgomp allocates and frees a team of one for every such region.
#ifndef CT_KERNELS_CPU_OMP_INLINE_H
#define CT_KERNELS_CPU_OMP_INLINE_H

// Regions run inline so far, in this process.
long ct_omp_inline_regions(void);

#endif
