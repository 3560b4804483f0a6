//! Summing the gradients of a CPU step's shards ([`crate::train_step`]).
//!
//! Every shard hands back a dense gradient per parameter, the word head's included (50,000 ×
//! 192 values in the shipped network). Adding them one shard after the other with candle
//! (one thread, a fresh tensor per addition) took 11 ms a step with two shards and 90–101 ms
//! with sixteen on the 2-core VM, growing with the shards while the rest of the step shrinks.
//! [`sum_in_shard_order`] adds them in one pass per parameter, in parallel over chunks of the
//! parameter, in the same order per value as that fold: the same bits (30–32 ms with sixteen
//! shards on two cores).

use candle_core::{CpuStorage, Device, Storage, Tensor};
use rayon::prelude::*;

use crate::error::{Result, TrainError};

/// Values per parallel task: large enough that a one-thread pool pays nothing for the split.
const CHUNK: usize = 1 << 14;

/// The sum of each parameter's gradients over the shards, `shards[k][i]` being shard `k`'s
/// gradient of parameter `i` (`None`: no gradient). Per value the sum runs in shard order,
/// `((g₀ + g₁) + g₂) + …`, as adding whole tensors shard after shard does, so the result has the
/// same bits; shards without a gradient are left out, and a parameter none has stays `None`.
/// Runs on the current rayon pool. CPU tensors of `f32` only.
///
/// ```
/// use candle_core::{Device, Tensor};
/// let g = |v: &[f32]| Some(Tensor::new(v, &Device::Cpu).unwrap());
/// let sum = laya_train::sum_in_shard_order(vec![vec![g(&[1.0, 2.0]), None], vec![g(&[0.5, 0.25]), None]]).unwrap();
/// assert_eq!(sum[0].as_ref().unwrap().to_vec1::<f32>().unwrap(), [1.5, 2.25]);
/// assert!(sum[1].is_none());
/// ```
pub fn sum_in_shard_order(shards: Vec<Vec<Option<Tensor>>>) -> Result<Vec<Option<Tensor>>> {
    let params = shards.first().map_or(0, Vec::len);
    if shards.iter().any(|s| s.len() != params) {
        return Err(TrainError::Config("shards returned gradients for different parameter lists".into()));
    }
    let mut per_param: Vec<Vec<Tensor>> = (0..params).map(|_| Vec::with_capacity(shards.len())).collect();
    for shard in shards {
        for (all, g) in per_param.iter_mut().zip(shard) {
            all.extend(g);
        }
    }
    per_param.into_iter().map(sum_one).collect()
}

/// One parameter's gradients summed in order (see [`sum_in_shard_order`]).
fn sum_one(grads: Vec<Tensor>) -> Result<Option<Tensor>> {
    let mut grads = grads.into_iter();
    let Some(first) = grads.next() else { return Ok(None) };
    let rest: Vec<Tensor> = grads.collect();
    if rest.is_empty() {
        return Ok(Some(first));
    }
    let shape = first.shape().clone();
    if rest.iter().any(|g| g.shape() != &shape) {
        return Err(TrainError::Config(format!("shards' gradients differ in shape (one is {shape:?})")));
    }
    let all: Vec<Tensor> = std::iter::once(first).chain(rest).map(|g| g.contiguous()).collect::<candle_core::Result<_>>()?;
    let guards: Vec<_> = all.iter().map(Tensor::storage_and_layout).collect();
    let mut slices: Vec<&[f32]> = Vec::with_capacity(guards.len());
    for (storage, layout) in &guards {
        let (a, b) = layout.contiguous_offsets().ok_or_else(|| TrainError::Config("a shard's gradient is not contiguous".into()))?;
        match &**storage {
            Storage::Cpu(CpuStorage::F32(v)) => slices.push(&v[a..b]),
            _ => return Err(TrainError::Config("shard gradients are summed on the CPU, in f32".into())),
        }
    }
    let mut out = vec![0f32; shape.elem_count()];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, acc)| {
        let span = c * CHUNK..c * CHUNK + acc.len();
        acc.copy_from_slice(&slices[0][span.clone()]);
        for g in &slices[1..] {
            for (a, &x) in acc.iter_mut().zip(&g[span.clone()]) {
                *a += x;
            }
        }
    });
    drop(guards);
    Ok(Some(Tensor::from_vec(out, shape, &Device::Cpu)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The naive twin: whole tensors added shard after shard with candle, as the step did.
    fn fold(shards: &[Vec<Option<Tensor>>]) -> Vec<Option<Tensor>> {
        let mut acc: Vec<Option<Tensor>> = vec![None; shards[0].len()];
        for shard in shards {
            for (a, g) in acc.iter_mut().zip(shard) {
                *a = match (a.take(), g.clone()) {
                    (Some(x), Some(y)) => Some((x + y).unwrap()),
                    (x, y) => x.or(y),
                };
            }
        }
        acc
    }

    fn bits(t: &Option<Tensor>) -> Option<Vec<u32>> {
        t.as_ref().map(|t| t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect())
    }

    /// Values of wildly different magnitudes, so that the order of the additions shows in the
    /// bits: a sum in any other order than the fold's would differ somewhere.
    fn grad(seed: u64, n: usize, cols: usize) -> Tensor {
        let mut rng = crate::Rng::new(seed, 7);
        let v: Vec<f32> = (0..n * cols).map(|_| ((rng.uniform() - 0.5) * 10f64.powi(rng.below(9) as i32 - 4)) as f32).collect();
        Tensor::from_vec(v, (n, cols), &Device::Cpu).unwrap()
    }

    #[test]
    fn sums_have_the_bits_of_the_shard_by_shard_fold() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for shards in [1usize, 2, 5, 16] {
            // Parameter 0 spans several chunks and ends inside one; parameter 1 is missing from
            // shard 1; parameter 2 is never there; parameter 3 is transposed (not contiguous).
            let list: Vec<Vec<Option<Tensor>>> = (0..shards as u64)
                .map(|k| {
                    vec![
                        Some(grad(k, 2 * CHUNK / 7 + 3, 7)),
                        (k != 1).then(|| grad(100 + k, 5, 3)),
                        None,
                        Some(grad(200 + k, 4, 6).t().unwrap()),
                    ]
                })
                .collect();
            let want = fold(&list);
            let got = pool.install(|| sum_in_shard_order(list)).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(bits(g), bits(w), "{shards} shards");
                if let (Some(g), Some(w)) = (g, w) {
                    assert_eq!(g.dims(), w.dims());
                }
            }
        }
    }

    #[test]
    fn a_reversed_order_would_show() {
        let list: Vec<Vec<Option<Tensor>>> = (0..6).map(|k| vec![Some(grad(k, 300, 5))]).collect();
        let reversed: Vec<Vec<Option<Tensor>>> = list.iter().rev().cloned().collect();
        assert_ne!(bits(&sum_in_shard_order(list).unwrap()[0]), bits(&fold(&reversed)[0]));
    }

    #[test]
    fn mismatched_shards_are_errors() {
        let a = Some(Tensor::zeros((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap());
        let b = Some(Tensor::zeros((3, 2), candle_core::DType::F32, &Device::Cpu).unwrap());
        assert!(sum_in_shard_order(vec![vec![a.clone()], vec![b]]).is_err());
        assert!(sum_in_shard_order(vec![vec![a.clone()], vec![a, None]]).is_err());
        let ints = Some(Tensor::zeros(4, candle_core::DType::U32, &Device::Cpu).unwrap());
        assert!(sum_in_shard_order(vec![vec![ints.clone()], vec![ints]]).is_err());
    }
}
