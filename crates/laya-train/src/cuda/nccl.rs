//! NCCL's all-reduce as the [`crate::Reducer`] of ranks on GPUs (docs/training.md, "Several
//! GPUs"): one communicator per rank, the sums taken in place on candle's stream of the rank's
//! device, so they are ordered with the step's kernels without a synchronisation.

use candle_core::cuda_backend::cudarc::nccl::safe::{Comm, Id, ReduceOp};
use candle_core::{CpuStorage, CudaStorage, DType, Device, InplaceOp1, Layout, Tensor};

use crate::error::{Result, TrainError};

/// The rendezvous of one group: made once (by the process that starts the ranks) and given to
/// every rank's [`NcclRank::new`].
#[derive(Debug, Clone, Copy)]
pub struct NcclId(Id);

impl NcclId {
    /// A new group's id (`ncclGetUniqueId`; needs NCCL's library, not a GPU).
    pub fn new() -> Result<NcclId> {
        Id::new().map(NcclId).map_err(|e| TrainError::Config(format!("NCCL: cannot make a group id: {e:?}")))
    }
}

/// One rank of an NCCL group, on one GPU.
#[derive(Debug)]
pub struct NcclRank {
    comm: Comm,
}

impl NcclRank {
    /// Joins group `id` as rank `rank` of `world` on `device` (a GPU from
    /// [`crate::parse_device`]). Blocks until every rank has joined, so the ranks call it side by
    /// side (a thread or a process each).
    pub fn new(device: &Device, rank: usize, world: usize, id: NcclId) -> Result<NcclRank> {
        let stream = device.as_cuda_device()?.cuda_stream();
        // NCCL binds a communicator to the device current on the calling thread.
        stream.context().bind_to_thread().map_err(|e| TrainError::Config(format!("NCCL rank {rank}: {e:?}")))?;
        let comm = Comm::from_rank(stream, rank, world, id.0)
            .map_err(|e| TrainError::Config(format!("NCCL: rank {rank} of {world} cannot join the group: {e:?}")))?;
        Ok(NcclRank { comm })
    }
}

impl crate::Reducer for NcclRank {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn world(&self) -> usize {
        self.comm.world_size()
    }

    fn sum(&self, x: &Tensor) -> Result<Tensor> {
        // A buffer of its own: `x` may share its storage with a tensor still in use.
        let sum = x.to_dtype(DType::F32)?.contiguous()?.copy()?;
        sum.inplace_op1(&AllReduce(&self.comm))?;
        Ok(sum)
    }
}

/// `ncclAllReduce` (sum) of a contiguous F32 tensor, in place.
struct AllReduce<'a>(&'a Comm);

impl InplaceOp1 for AllReduce<'_> {
    fn name(&self) -> &'static str {
        "nccl-all-reduce"
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("NCCL sums tensors on GPUs; ranks on the CPU use laya_train::LocalGroup")
    }

    fn cuda_fwd(&self, s: &mut CudaStorage, l: &Layout) -> candle_core::Result<()> {
        let (a, b) =
            l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("NCCL all-reduce: the tensor must be contiguous".into()))?;
        let mut view = s.as_cuda_slice_mut::<f32>()?.slice_mut(a..b);
        self.0
            .all_reduce_in_place(&mut view, &ReduceOp::Sum)
            .map_err(|e| candle_core::Error::Msg(format!("NCCL all-reduce of {} values: {e:?}", b - a)))?;
        Ok(())
    }
}
