/* rendezvous.h: MPI for ranks that no MPI launcher started: those of a
   torchrun-style launcher (torchrun, DeepSpeed's, or by hand: RANK,
   WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and those of a Slurm step without
   PMIx (srun --mpi=none or pmi2, which Open MPI cannot use). Each rank starts
   MPI as a singleton and the ranks join one communicator through
   MPI_Comm_connect/accept; a TCP socket at MASTER_ADDR:MASTER_PORT only hands
   out the names they connect with. */
#ifndef ZORCH_ZERO_RENDEZVOUS_H
#define ZORCH_ZERO_RENDEZVOUS_H
#include <stdbool.h>

#include "../ops/core/error.h"

typedef struct rdv_env {
  int rank, world;
  char addr[256]; /* rank 0's host */
  int port;       /* where rank 0 listens */
  const char *who; /* the variables they came from, for messages */
} rdv_env;

/* Reads the launcher's variables: true with *e filled when this process is
   one of world > 1 ranks started that way. */
bool rdv_from_env(rdv_env *e);

#ifdef ZORCH_MPI
#include <mpi.h>
/* Starts MPI and joins the world's ranks into *world (rank order = RANK),
   waiting at most timeout_s for the others; an error names what failed. */
zorch_status rdv_join(const rdv_env *e, double timeout_s, MPI_Comm *world);
/* A rank of the joined world whose process has ended (its rendezvous socket
   closed), or -1; cheap enough to ask while waiting in a collective. */
int rdv_lost(void);
/* After MPI_Finalize: ends what rdv_join started (rank 0's name server). */
void rdv_finish(void);
#endif
#endif
