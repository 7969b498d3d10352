/* The SLURM batch script of qsweep slurm (deploy/slurm/qsweep-worker.sbatch), embedded at
 * build time (embed_text.cmake) and handed to sbatch on its standard input, so the command
 * works wherever the binary is installed. */
#ifndef QSWEEP_SLURM_SCRIPT_H
#define QSWEEP_SLURM_SCRIPT_H

/* The script's text. */
extern const char qsweep_slurm_sbatch[];

#endif
