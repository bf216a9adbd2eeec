# shellcheck shell=bash
# slurm/site-env.example.sh - the settings of YOUR cluster, for slurm/train.sbatch and
# slurm/sweep.sbatch. Copy it to slurm/site-env.sh (which the scripts source before srun, from the
# submit directory; it is yours, do not commit it) and uncomment what your site needs. Everything
# here is commented out: the defaults of NCCL, Open MPI and HDF5 are right on many clusters, and a
# wrong interface or HCA name is worse than none. Ask your site's documentation or support which
# values apply; `ibv_devinfo`, `ip -br addr` and `nvidia-smi topo -m` on a compute node help.
# This file is sourced by bash with `set -u` in force: use ${VAR:-} when reading a variable.

# --- Modules: the same compilers and libraries quartet was built with (make on a login node). ---
# module purge                                   # start from a known state, not the login shell's
# module load gcc/12 cuda/13.0 openmpi/4.1 hdf5/1.10-mpi boost/1.74

# --- NCCL: collectives inside each model group (GPUs). ---
# export NCCL_DEBUG=WARN                         # INFO prints the chosen transports and rings: the first
#                                                # thing to look at when a job hangs or is slow
# export NCCL_DEBUG_SUBSYS=INIT,NET              # with NCCL_DEBUG=INFO: only setup and network lines
# export NCCL_SOCKET_IFNAME=ib0                  # the interface for NCCL's bootstrap (and socket
#                                                # transport): without it NCCL may pick a
#                                                # management or docker interface that other nodes
#                                                # cannot reach; "^lo,docker" excludes instead
# export NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3 # the InfiniBand/RoCE adapters to use: leaves out
#                                                # storage-only or down ports NCCL would otherwise try
# export NCCL_IB_GID_INDEX=3                     # RoCE only: the GID of RoCE v2 over IPv4 (often 3);
#                                                # the wrong one makes inter-node connections fail
# export NCCL_NET_GDR_LEVEL=PHB                  # how close NIC and GPU must be for GPUDirect RDMA;
#                                                # raise it if NCCL_DEBUG=INFO shows GDR off where
#                                                # the topology allows it
# export NCCL_CROSS_NIC=0                        # 0 keeps each ring on one rail (rail-optimised fabrics);
#                                                # 1 for fabrics where any NIC reaches any NIC
# export NCCL_IB_TIMEOUT=22                      # longer InfiniBand retry timeout on congested fabrics
#                                                # (a job that dies with "IB timeout" under load)
# Leave NCCL's NVLink SHARP / multicast setting (NCCL_NVLS_ENABLE) at its default.

# --- Open MPI: the launch (srun --mpi=pmix) and the exchanges between model groups. ---
# export QUARTET_SRUN_MPI=pmix_v4                # the PMIx plugin's name here (`srun --mpi=list`)
# export OMPI_MCA_pml=ucx                        # UCX for point-to-point: InfiniBand/RoCE at full speed
# export OMPI_MCA_btl=^openib,smcuda              # with pml=ucx: keep the old openib transport out of the
#                                                # way (it warns, or grabs the HCA, on UCX systems)
# export UCX_TLS=rc,sm,self                      # UCX transports: reliable connection, shared memory;
#                                                # add cuda_copy,cuda_ipc only for a CUDA-aware build
# export UCX_NET_DEVICES=mlx5_0:1                # the HCA port UCX uses (the same fabric NCCL uses)
# export OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,vader,self  # no InfiniBand at all: plain TCP between nodes
# export OMPI_MCA_btl_tcp_if_include=ib0         # with btl=tcp: the interface (as NCCL_SOCKET_IFNAME)

# --- HDF5 on a parallel file system (checkpoints and run.h5 are written collectively). ---
# Put run.out on the parallel file system, not on home. On Lustre, stripe the run directory
# before the first run: files made inside inherit it, and a checkpoint written by every rank
# needs more than one storage target to be fast.
#   lfs setstripe -c 8 -S 4M runs/my-run         # (once, by hand; -c -1 = every target)
# export HDF5_USE_FILE_LOCKING=FALSE             # file systems without POSIX locks (some Lustre and NFS
#                                                # mounts) make HDF5 refuse to open files ("unable to
#                                                # lock file"); quartet's own run.h5.lock still needs
#                                                # flock (Lustre: mounted with -o flock)
# export OMPI_MCA_io=romio321                    # Open MPI's ROMIO instead of OMPIO for MPI-IO: ROMIO
#                                                # takes the hints below (check `ompi_info | grep io`)
# export ROMIO_HINTS=$PWD/slurm/romio-hints      # a file of ROMIO hints, one "name value" per line:
#                                                #   romio_cb_write enable   (collective buffering:
#                                                #                            few large writes)
#                                                #   romio_ds_write disable  (no read-modify-write)
#                                                #   striping_factor 8       (Lustre stripes of new files)
#                                                #   striping_unit 4194304
# export MPICH_MPIIO_HINTS="*:romio_cb_write=enable:striping_factor=8"   # Cray MPICH's way of the same

# --- CPU threads. ---
# export OMP_NUM_THREADS=8                       # train.sbatch sets it to --cpus-per-task unless set here
