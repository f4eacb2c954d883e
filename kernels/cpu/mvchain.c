/* mvchain.c: a chain of one-token matvecs in plain C (kernels/ops.h,
 * cpu_mv_chain), the reference the card's persistent chain (cuda_mvchain,
 * kernels/cuda/mvchain.cu) is checked against: each step is cpu_matvec of
 * its input, the SwiGLU in front of it as cpu_swiglu computes it, the
 * residual after it as cpu_add does. */
#include <stdlib.h>

#include "kernels/ops.h"

int cpu_mv_chain(const mv_chain_op *ops, int n_ops)
{
    for (int i = 0; i < n_ops; i++) {
        const mv_chain_op *o = &ops[i];
        float *a = NULL;
        const float *in = o->x;
        if (o->xu) { /* the step's input is swiglu(x, xu) */
            a = malloc((size_t)o->cols * sizeof *a);
            if (!a)
                return -1;
            cpu_swiglu(o->x, o->xu, o->cols, a);
            in = a;
        }
        cpu_matvec(o->type, o->w, o->rows, o->cols, in, o->y);
        if (o->res)
            cpu_add(o->y, o->res, o->rows);
        free(a);
    }
    return 0;
}
