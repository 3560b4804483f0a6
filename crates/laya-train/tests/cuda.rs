//! GPU against CPU: every training op, value and gradient; then whole training steps from the
//! same weights and batches, losses and the trained network's top five. Runs where a build with
//! the `cuda` feature finds a GPU (scripts/gpu-check.sh runs it on the H200 machine); elsewhere
//! each test says why it was skipped and passes.

use candle_core::{Device, Tensor, Var};
use laya_train::*;
use std::sync::Arc;

/// The first GPU, or `None` with the reason on stderr.
fn gpu() -> Option<Device> {
    if !cfg!(feature = "cuda") {
        eprintln!("skipped: laya-train was built without the `cuda` feature (scripts/gpu-check.sh builds and runs this test)");
        return None;
    }
    // As `laya train --device cuda` opens it.
    match parse_device("cuda") {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped: no usable CUDA device ({e})");
            None
        }
    }
}

fn random(shape: (usize, usize), seed: u64, scale: f64) -> Vec<f32> {
    let mut rng = Rng::new(seed, 3);
    (0..shape.0 * shape.1).map(|_| (rng.normal() * scale) as f32).collect()
}

fn targets(b: usize, v: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed, 5);
    let mut t = vec![0f32; b * v];
    for r in 1..b {
        for _ in 0..3 {
            t[r * v + rng.below(v)] += (rng.uniform() * 2.0) as f32;
        }
    }
    t
}

fn host(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_device(&Device::Cpu).unwrap().to_vec1().unwrap()
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// `f` of the inputs on the CPU and on the GPU: the same values, and the same gradients of a
/// weighted sum of the outputs with respect to every input, to `tol` relative to the largest.
fn same_on_both(gpu: &Device, inputs: &[(Vec<f32>, (usize, usize))], f: impl Fn(&[Tensor]) -> Tensor, tol: f32, what: &str) {
    let run = |dev: &Device| {
        let vars: Vec<Var> =
            inputs.iter().map(|(data, shape)| Var::from_tensor(&Tensor::from_vec(data.clone(), *shape, dev).unwrap()).unwrap()).collect();
        let xs: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let y = f(&xs);
        let w = Tensor::from_vec(random((1, y.elem_count()), 77, 1.0), y.shape(), dev).unwrap();
        let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let g: Vec<Vec<f32>> = vars.iter().map(|v| grads.get(v.as_tensor()).map(host).unwrap_or_default()).collect();
        (host(&y), g)
    };
    let ((yc, gc), (yg, gg)) = (run(&Device::Cpu), run(gpu));
    let d = max_rel_diff(&yc, &yg);
    assert!(d <= tol, "{what}: values differ by {d} (relative)");
    for (i, (a, b)) in gc.iter().zip(&gg).enumerate() {
        let d = max_rel_diff(a, b);
        assert!(d <= tol, "{what}: gradient of input {i} differs by {d} (relative)");
    }
}

#[test]
fn every_training_op_matches_the_cpu_on_the_gpu() {
    let Some(dev) = gpu() else { return };
    let (b, v) = (6, 300);
    let classes = Arc::new(WordClasses::new(&(0..v as u32).map(|w| if w < 20 { w } else { 20 + (w * 7) % 13 }).collect::<Vec<_>>()));
    let x = (random((b, v), 1, 4.0), (b, v));
    let bias = (random((1, v), 2, 1.0), (1, v));
    let t = targets(b, v, 3);
    let tt = |xs: &[Tensor]| Tensor::from_vec(t.clone(), (b, v), xs[0].device()).unwrap();
    let flat = |x: &Tensor| x.flatten_all().unwrap();
    same_on_both(&dev, std::slice::from_ref(&x), |xs| soft_cross_entropy(&xs[0], &tt(xs)).unwrap(), 1e-5, "soft_cross_entropy");
    same_on_both(
        &dev,
        &[x.clone(), bias.clone()],
        |xs| biased_soft_cross_entropy(&xs[0], &flat(&xs[1]), &tt(xs)).unwrap(),
        1e-5,
        "biased_soft_cross_entropy",
    );
    same_on_both(
        &dev,
        &[x.clone(), bias.clone()],
        |xs| within_class_soft_cross_entropy(&xs[0], &flat(&xs[1]), &tt(xs), &classes).unwrap(),
        1e-5,
        "within_class_soft_cross_entropy",
    );
    same_on_both(&dev, std::slice::from_ref(&x), |xs| class_log_softmax(&xs[0], &classes).unwrap(), 1e-5, "class_log_softmax");
    let sums = |d: &Device| host(&class_sums(&Tensor::from_vec(t.clone(), (b, v), d).unwrap(), &classes).unwrap());
    assert!(max_rel_diff(&sums(&Device::Cpu), &sums(&dev)) <= 1e-6, "class_sums");
    let h = (random((b, 48), 4, 2.0), (b, 48));
    let w = (random((1, 48), 5, 1.0), (1, 48));
    same_on_both(&dev, std::slice::from_ref(&h), |xs| gelu_tanh(&xs[0]).unwrap(), 1e-5, "gelu_tanh");
    same_on_both(&dev, &[h.clone(), w.clone()], |xs| add_columns(&xs[0], &flat(&xs[1])).unwrap(), 1e-6, "add_columns");
    same_on_both(
        &dev,
        &[h.clone(), w.clone(), w.clone()],
        |xs| scale_shift_columns(&xs[0], &flat(&xs[1]), &flat(&xs[2])).unwrap(),
        1e-6,
        "scale_shift_columns",
    );
    same_on_both(&dev, std::slice::from_ref(&h), |xs| normalize_rows(&xs[0], 1e-5).unwrap(), 1e-4, "normalize_rows");
    same_on_both(&dev, &[h], |xs| softmax_rows(&xs[0]).unwrap(), 1e-5, "softmax_rows");
}

/// A bias gradient over 300,000 rows: the GPU's column sums reduce 4,688 partial rows in three
/// more passes (the shapes above take one). Against sums in f64: the CPU's one running sum per
/// column drifts by ~1e-5 of the largest over this many rows, the passes by ~2e-7.
#[test]
fn a_tall_bias_gradient_matches_exact_sums_on_the_gpu() {
    let Some(dev) = gpu() else { return };
    let (rows, cols) = (300_000, 48);
    let w = random((rows, cols), 7, 1.0);
    let mut exact = vec![0f64; cols];
    for row in w.chunks_exact(cols) {
        for (e, &x) in exact.iter_mut().zip(row) {
            *e += x as f64;
        }
    }
    let h = Tensor::from_vec(random((rows, cols), 6, 1.0), (rows, cols), &dev).unwrap();
    let bias = Var::from_tensor(&Tensor::zeros(cols, candle_core::DType::F32, &dev).unwrap()).unwrap();
    let weights = Tensor::from_vec(w, (rows, cols), &dev).unwrap();
    let y = add_columns(&h, bias.as_tensor()).unwrap();
    let grads = (&y * &weights).unwrap().sum_all().unwrap().backward().unwrap();
    let got = host(grads.get(bias.as_tensor()).unwrap());
    let exact: Vec<f32> = exact.iter().map(|&e| e as f32).collect();
    let d = max_rel_diff(&exact, &got);
    assert!(d <= 1e-6, "column sums of 300,000 rows differ from f64 sums by {d} (relative)");
}

/// A small corpus: forty contexts, each with a clicked word and two shown alternatives.
fn events() -> Vec<Event> {
    (0..40)
        .map(|i| {
            let ctx: String = (0..(3 + i % 6)).map(|k| char::from_u32(0x4E00 + ((i * 7 + k * 3) % 40) as u32).unwrap()).collect();
            let shown = |w: usize, r: u32| Shown { word: format!("w{w}"), replace: r };
            Event {
                context: ctx,
                shown: vec![shown((i + 1) % 60, 0), shown(i, (i % 3) as u32), shown((i + 9) % 60, 0)],
                clicked: Some(1),
                weight: 1.0 + (i % 3) as f32,
            }
        })
        .collect()
}

fn config(factorised: bool, scheme: PositionScheme) -> ModelConfig {
    let words: Vec<String> = (0..60).map(|i| format!("w{i}")).collect();
    let freqs: Vec<u32> = (0..60).map(|i| 100 - i).collect();
    let mut table: Vec<u32> = (0..40).map(|i| 0x4E00 + i).collect();
    table.sort_unstable();
    let mut cfg = ModelConfig::standard(words, freqs, Mapping::Table(table));
    cfg.d_model = 32;
    cfg.heads = 2;
    cfg.ffn = vec![64, 64];
    cfg.position_scheme = scheme;
    if factorised {
        cfg.word_class = Some((0..60u32).map(|w| if w < 8 { w } else { 8 + w % 5 }).collect());
    }
    cfg
}

/// Fifty steps on each device from the same weights and batches: the losses stay within 1e-3
/// (relative) of the CPU's at every step, and the trained networks rank the same five words
/// first for every context (up to ties the two could break differently).
#[test]
fn fifty_steps_on_the_gpu_track_the_cpu() {
    let Some(dev) = gpu() else { return };
    for (factorised, scheme) in
        [(false, PositionScheme::RelativeCausal), (true, PositionScheme::RelativeCausal), (true, PositionScheme::LearnedAbsolute)]
    {
        let cfg = config(factorised, scheme);
        let tc = TrainConfig { batch_size: 16, ..TrainConfig::default() };
        let evs = events();
        let run = |device: &Device| {
            let net = LayaNet::new(cfg.clone(), 7).unwrap().to_device(device).unwrap();
            let set = encode_events(&evs, net.config(), &tc);
            let mut opt = AdamW::new(net.params(), &tc).unwrap();
            let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
            let mut losses = Vec::new();
            for step in 0..50 {
                let idx: Vec<usize> = (0..16).map(|k| (step * 16 + k) % set.len()).collect();
                let batch = make_batch(&set, &idx, cfg.vocab(), cfg.replace_classes, net.device()).unwrap();
                let (parts, _) = pool.install(|| train_step(&net, &mut opt, &batch, &tc, 3e-3)).unwrap();
                losses.push(parts.total);
            }
            let contexts: Vec<&str> = evs.iter().map(|e| e.context.as_str()).collect();
            let (words, _) = net.to_device(&Device::Cpu).unwrap().predict_logits(&contexts).unwrap();
            (losses, words)
        };
        let ((lc, wc), (lg, wg)) = (run(&Device::Cpu), run(&dev));
        for (s, (a, b)) in lc.iter().zip(&lg).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * a.abs().max(1.0),
                "factorised {factorised}, {scheme:?}: step {s} loss {a} on the CPU, {b} on the GPU"
            );
        }
        assert!(lc[49] < lc[0], "the run did not learn: {} → {}", lc[0], lc[49]);
        for (ctx, (a, b)) in wc.iter().zip(&wg).enumerate() {
            let top = |s: &[f32]| {
                let mut i: Vec<usize> = (0..s.len()).collect();
                i.sort_by(|&x, &y| s[y].total_cmp(&s[x]));
                i
            };
            let (ta, tb) = (top(a), top(b));
            for k in 0..5 {
                // A different word at rank k is a tie only if the CPU scores both nearly alike.
                let (x, y) = (ta[k], tb[k]);
                assert!(x == y || (a[x] - a[y]).abs() < 1e-3, "context {ctx}: rank {k} is w{x} on the CPU, w{y} on the GPU");
            }
        }
        eprintln!("factorised {factorised}, {scheme:?}: loss {:.4} → {:.4} (CPU), {:.4} → {:.4} (GPU)", lc[0], lc[49], lg[0], lg[49]);
    }
}

/// A whole run through [`train_from`] with `RunOptions::device`: checkpoints written from GPU
/// moments resume on the CPU and give the CPU run's state.
#[test]
fn a_gpu_run_checkpoints_and_resumes_on_the_cpu() {
    let Some(dev) = gpu() else { return };
    let dir = std::env::temp_dir().join(format!("laya-cuda-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = config(true, PositionScheme::RelativeCausal);
    let tc = TrainConfig { batch_size: 8, epochs: 1, ..TrainConfig::default() };
    let evs = events();
    let opts = RunOptions { checkpoint_dir: Some(dir.clone()), device: dev, ..RunOptions::default() };
    let first = train_from(LayaNet::new(cfg.clone(), 3).unwrap(), tc.clone(), &evs, &evs, &opts, &mut NoHooks).unwrap();
    assert!(!first.net.device().is_cpu());
    let tc2 = TrainConfig { epochs: 2, ..tc };
    let resumed =
        train_from(LayaNet::new(cfg, 3).unwrap(), tc2, &evs, &evs, &RunOptions { resume: true, device: Device::Cpu, ..opts }, &mut NoHooks)
            .unwrap();
    assert_eq!(resumed.state.epochs.len(), 2);
    assert!(resumed.state.epochs[1].train_loss < first.state.epochs[0].train_loss);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "cuda")]
/// Every step's loss.
#[derive(Default)]
struct StepLosses(Vec<(usize, f32)>);
#[cfg(feature = "cuda")]
impl TrainHooks for StepLosses {
    fn on_step(&mut self, r: &StepReport) {
        self.0.push((r.step, r.loss.total));
    }
}

#[cfg(feature = "cuda")]
/// `n` events of the corpus above, repeated with shifted clicks so that shards differ.
fn many_events(n: usize) -> Vec<Event> {
    let base = events();
    (0..n)
        .map(|i| {
            let mut e = base[i % base.len()].clone();
            e.clicked = Some([1, 0, 2][(i / base.len()) % 3]);
            e
        })
        .collect()
}

/// `world` ranks through NCCL, GPUs 0.., per-rank batch `batch`, rank 0's losses and weights.
#[cfg(feature = "cuda")]
fn nccl_run(world: usize, batch: usize, epochs: usize, evs: &[Event]) -> (Vec<(usize, f32)>, Vec<f32>) {
    use std::rc::Rc;
    let id = NcclId::new().unwrap();
    let join = |rank: usize| -> Result<(Rc<dyn Reducer>, Device)> {
        let dev = parse_device(&format!("cuda:{rank}"))?;
        let reducer = NcclRank::new(&dev, rank, world, id)?;
        Ok((Rc::new(reducer), dev))
    };
    let cfg = config(true, PositionScheme::RelativeCausal);
    let start = |_: usize, _: &Device| LayaNet::new(cfg.clone(), 3);
    let setup = RankSetup { world, join: &join, start: &start, stop: &|| false, on_fail: &|r, e| panic!("rank {r}: {e}") };
    let tc = TrainConfig { batch_size: batch, epochs, log_every: 1, ..TrainConfig::default() };
    let mut hooks = StepLosses::default();
    let out = train_ranks(&setup, &tc, evs.to_vec(), &evs[..40], &RankOptions::default(), &mut hooks).unwrap();
    (hooks.0, weights(&out.net))
}

#[cfg(feature = "cuda")]
fn weights(net: &LayaNet) -> Vec<f32> {
    net.params().iter().flat_map(|p| host(p.var.as_tensor())).collect()
}

#[cfg(feature = "cuda")]
/// One device with the union's batch drawn from `shards` shards: its losses and weights.
fn one_gpu(dev: &Device, shards: usize, batch: usize, epochs: usize, evs: &[Event]) -> (Vec<(usize, f32)>, Vec<f32>) {
    let tc = TrainConfig { batch_size: batch, epochs, log_every: 1, ..TrainConfig::default() };
    let opts = RunOptions { device: dev.clone(), data_shards: shards, ..RunOptions::default() };
    let mut hooks = StepLosses::default();
    let net = LayaNet::new(config(true, PositionScheme::RelativeCausal), 3).unwrap();
    let out = train_from(net, tc, evs, &evs[..40], &opts, &mut hooks).unwrap();
    (hooks.0, weights(&out.net))
}

#[cfg(feature = "cuda")]
fn same_run(a: &(Vec<(usize, f32)>, Vec<f32>), b: &(Vec<(usize, f32)>, Vec<f32>), tol: f32, what: &str) {
    assert_eq!(a.0.len(), b.0.len(), "{what}: steps");
    for (x, y) in a.0.iter().zip(&b.0) {
        assert!(x.0 == y.0 && (x.1 - y.1).abs() <= tol * y.1.abs().max(1.0), "{what}, step {}: {} vs {}", x.0, x.1, y.1);
    }
    let d = max_rel_diff(&a.1, &b.1);
    eprintln!(
        "{what}: {} steps, loss {:.5} → {:.5} and {:.5} → {:.5}, weights within {d:.2e}",
        a.0.len(),
        a.0[0].1,
        a.0[a.0.len() - 1].1,
        b.0[0].1,
        b.0[b.0.len() - 1].1
    );
    assert!(d <= 10.0 * tol, "{what}: weights differ by {d}");
}

/// NCCL's plumbing on one GPU: a group of one rank (communicator, in-place all-reduce of the
/// packed gradients, the embedding rows' union) takes the steps of a plain run.
#[test]
fn one_nccl_rank_takes_the_steps_of_a_plain_gpu_run() {
    let Some(dev) = gpu() else { return };
    #[cfg(feature = "cuda")]
    {
        let evs = many_events(200);
        let plain = one_gpu(&dev, 0, 16, 2, &evs);
        same_run(&nccl_run(1, 16, 2, &evs), &plain, 1e-5, "1 NCCL rank against a plain run");
    }
    let _ = dev;
}

/// N GPUs with a batch of B each take the steps of one GPU with a batch of N·B drawn from the
/// same shards, over 300 steps: losses within 1e-3 (relative) at every step. Needs two GPUs.
#[test]
fn nccl_ranks_take_the_steps_of_one_gpu_with_their_union_batch() {
    let Some(dev) = gpu() else { return };
    #[cfg(feature = "cuda")]
    {
        let n = candle_core::cuda_backend::cudarc::driver::CudaContext::device_count().unwrap_or(0) as usize;
        if n < 2 {
            eprintln!("skipped: needs two GPUs, this machine has {n}");
            return;
        }
        let world = n.min(4);
        // 4 samples a rank a step; 300 steps in all.
        let evs = many_events(4 * world * 50);
        let one = one_gpu(&dev, world, 4 * world, 6, &evs);
        same_run(&nccl_run(world, 4, 6, &evs), &one, 1e-3, &format!("{world} NCCL ranks against one GPU"));
    }
    let _ = dev;
}
