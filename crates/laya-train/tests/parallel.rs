//! Data-parallel training on the CPU (threads of one process summing through shared memory,
//! `LocalGroup`): N ranks with a batch of B each take the steps one device takes with a batch
//! of N·B drawn from the same shards, rank 0 alone writes checkpoints, and a run resumes on
//! another number of ranks. `tests/cuda.rs` holds NCCL's ranks to the same, where GPUs are.

use laya_train::*;
use std::rc::Rc;

fn cfg(words: usize) -> ModelConfig {
    let words: Vec<String> = (0..words).map(|i| format!("w{i}")).collect();
    let freqs = vec![1; words.len()];
    let mut table: Vec<u32> = (0..40).map(|i| 0x4E00 + i).collect();
    table.sort_unstable();
    let classes = laya_format::assign_word_classes_own(words.iter().map(String::as_str), &freqs, 6, 4);
    let mut cfg = ModelConfig::standard(words, freqs, Mapping::Table(table));
    cfg.d_model = 32;
    cfg.heads = 2;
    cfg.ffn = vec![64];
    cfg.position_scheme = PositionScheme::RelativeCausal;
    cfg.word_class = Some(classes);
    cfg
}

/// 61 events (shards of unequal size), contexts of 2–8 characters, weights that differ (so the
/// loss divisors must be the union's, not each rank's).
fn events() -> Vec<Event> {
    (0..61)
        .map(|i| {
            let ctx: String = (0..(2 + i % 7)).map(|k| char::from_u32(0x4E00 + ((i * 5 + k * 3) % 40) as u32).unwrap()).collect();
            let shown = (0..3).map(|k| Shown { word: format!("w{}", (i * 3 + k * 11) % 60), replace: (k % 2) as u32 }).collect();
            Event { context: ctx, shown, clicked: if i % 13 == 5 { None } else { Some(i % 3) }, weight: 1.0 + (i % 4) as f32 }
        })
        .collect()
}

/// Every step's loss.
#[derive(Default)]
struct Losses(Vec<(usize, f32)>);
impl TrainHooks for Losses {
    fn on_step(&mut self, r: &StepReport) {
        self.0.push((r.step, r.loss.total));
    }
}

fn tc(batch: usize, epochs: usize) -> TrainConfig {
    TrainConfig { batch_size: batch, epochs, log_every: 1, warmup_steps: 2, lr: 5e-3, ..TrainConfig::default() }
}

fn weights(net: &LayaNet) -> Vec<Vec<f32>> {
    net.params().iter().map(|p| p.var.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect()
}

/// What a rank ends with: its losses per step, its final weights and its step count.
type RankRun = (Vec<(usize, f32)>, Vec<Vec<f32>>, usize);

/// Runs `world` ranks on threads, rank `r` on `deal(events)[r]`; returns each rank's losses,
/// final weights and steps.
fn run_ranks(world: usize, tc: &TrainConfig, opts: &(dyn Fn(usize) -> RunOptions + Sync)) -> Vec<RankRun> {
    let shards = deal(events(), world);
    std::thread::scope(|s| {
        let handles: Vec<_> = LocalGroup::new(world)
            .into_iter()
            .zip(shards)
            .enumerate()
            .map(|(r, (rank, shard))| {
                s.spawn(move || {
                    let mut hooks = Losses::default();
                    let opts = RunOptions { parallel: Some(Rc::new(rank)), ..opts(r) };
                    let out = train(cfg(60), tc.clone(), &shard, &events()[..20], &opts, &mut hooks).unwrap();
                    (hooks.0, weights(&out.net), out.state.step)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn close(a: f32, b: f32, tol: f32) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn ranks_take_the_steps_of_one_device_with_their_union_batch() {
    for world in [1, 2, 3] {
        let b = 4;
        // One device, the union's batch drawn from the same shards.
        let mut one = Losses::default();
        let single = RunOptions { data_shards: world, ..RunOptions::default() };
        let out = train(cfg(60), tc(world * b, 2), &events(), &events()[..20], &single, &mut one).unwrap();
        let ranks = run_ranks(world, &tc(b, 2), &|_| RunOptions::default());
        assert_eq!(ranks[0].2, out.state.step, "world {world}: steps");
        assert!(out.state.step >= 8, "world {world}: {} steps", out.state.step);
        for (r, (losses, w, _)) in ranks.iter().enumerate() {
            assert_eq!(losses.len(), one.0.len());
            for (x, y) in losses.iter().zip(&one.0) {
                assert!(x.0 == y.0 && close(x.1, y.1, 1e-4), "world {world} rank {r} step {}: {} vs {}", x.0, x.1, y.1);
            }
            // Every rank ends with the same bits; and with one device's weights to rounding.
            assert_eq!(w, &ranks[0].1, "world {world}: rank {r} drifted from rank 0");
            for (a, b) in w.iter().flatten().zip(weights(&out.net).iter().flatten()) {
                assert!(close(*a, *b, 1e-3), "world {world}: weight {a} vs {b}");
            }
        }
    }
}

#[test]
fn rank_zero_writes_and_a_run_resumes_on_another_number_of_ranks() {
    let base = std::env::temp_dir().join(format!("laya-parallel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dirs: Vec<_> = (0..2).map(|r| base.join(format!("rank{r}"))).collect();
    // Each rank is given its own directory: only rank 0's may hold anything.
    let first = run_ranks(2, &tc(4, 1), &|r| RunOptions { checkpoint_dir: Some(dirs[r].clone()), ..RunOptions::default() });
    assert!(dirs[0].join("state.json").exists() && dirs[0].join("model.safetensors").exists());
    assert!(std::fs::read_dir(&dirs[1]).map_or(true, |mut d| d.next().is_none()), "rank 1 wrote a checkpoint");
    let steps = first[0].2;
    // Three ranks continue the two-rank run for a second epoch, from rank 0's checkpoint.
    let resumed = run_ranks(3, &tc(4, 2), &|_| RunOptions { checkpoint_dir: Some(dirs[0].clone()), resume: true, ..RunOptions::default() });
    assert!(resumed[0].2 > steps, "no step after resuming: {} then {}", steps, resumed[0].2);
    assert_eq!(resumed[0].0.first().map(|s| s.0), Some(steps + 1), "the step count carries on");
    assert!(resumed.iter().all(|r| r.1 == resumed[0].1));
    // And one device continues it too.
    let mut one = Losses::default();
    let opts = RunOptions { checkpoint_dir: Some(dirs[0].clone()), resume: true, ..RunOptions::default() };
    let out = train(cfg(60), tc(4, 3), &events(), &events()[..20], &opts, &mut one).unwrap();
    assert_eq!(out.state.epochs.len(), 3);
    let _ = std::fs::remove_dir_all(&base);
}
