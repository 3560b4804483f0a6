//! The session settings that the forward pass and ranking read, apart from the session so that
//! neither depends on it.

/// Precision of the activations fed to Q8_0 linear layers (block matrices and the word head).
/// Other weight types always multiply f32 activations.
///
/// ```no_run
/// use laya_runtime::{ActPrecision, Session};
/// let mut s = Session::new(laya_runtime::Model::load("model.laya")?);
/// s.set_act_precision(ActPrecision::F32); // the exact path the numpy reference computes
/// # Ok::<(), laya_runtime::LoadError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActPrecision {
    /// Q8_0 weights are dequantised on the fly and multiplied with f32 activations.
    F32,
    /// Activations are quantised to int8 blocks of 32 (one f32 scale each) and multiplied with
    /// the int8 weights in integer arithmetic (`Kernels::matmul_q8`): faster, and within the
    /// activation rounding (half a step of `max|x|/127` per value) of the f32 path. Used where
    /// this CPU's int8 kernels beat the f32 ones: in every Q8_0, Q4_0 and Q4_1 layer on x86
    /// CPUs with AVX2 (the packed kernels, `Kernels::packs_q8`, `Kernels::packs_q4`), and
    /// elsewhere in the one-position Q8_0 layers (the last block's query side and the word
    /// head). So a quantised model's logits differ between those kinds of CPU by the
    /// activation rounding of the other layers; [`ActPrecision::Int8All`] computes the x86
    /// numbers on any CPU.
    #[default]
    Int8,
    /// Int8 activations in every Q8_0, Q4_0 and Q4_1 layer on every CPU (slower than
    /// [`ActPrecision::Int8`] on CPUs without VNNI, much slower for 4-bit layers on CPUs
    /// without AVX2, which then run the scalar reference; the same results as `Int8` on
    /// AVX-512 VNNI CPUs, up to float summation order). For evaluating what VNNI devices
    /// compute.
    Int8All,
}

impl std::fmt::Display for ActPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ActPrecision::F32 => "f32",
            ActPrecision::Int8 => "int8",
            ActPrecision::Int8All => "int8-all",
        })
    }
}

impl std::str::FromStr for ActPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(ActPrecision::F32),
            "int8" => Ok(ActPrecision::Int8),
            "int8-all" => Ok(ActPrecision::Int8All),
            other => Err(format!("unknown activation precision `{other}` (expected `f32`, `int8` or `int8-all`)")),
        }
    }
}

/// How many new characters a `relative_causal` session computes one at a time from the kept
/// keys and values before it recomputes from scratch (a committed candidate adds several
/// characters at once; a longer jump is cheaper computed whole).
pub const MAX_INCREMENTAL_CHARS: usize = 8;

/// How a session turns the two heads into scores of `(w, i)` pairs (docs/format.md §3 step 6):
/// a next word `(w, 0)` against a completion `(w, i ≥ 1)` of the `i` typed characters.
///
/// The word head's `P(w)` is trained on the word being typed *whatever* has been typed of it,
/// so when the context ends mid-word it already puts its mass on the completions of the typed
/// characters: it is the marginal of `w` over `i`, not `P(w | i)`. Multiplying it by `P(i)`
/// ([`CompletionRule::Product`]) counts the mid-word evidence twice and pushes completions out of
/// the bar. [`CompletionRule::Split`], the default, gives the whole `P(w)` of a word that starts
/// with typed characters to its completions; [`CompletionRule::Marginal`] leaves the part the
/// replace head does not claim to the next word `(w, 0)`, which put words such as 非常重视 on
/// the bar as a next word after 非常. Measured on the default model (README "Completion
/// rules"): split raises `top5_k1` by a point over marginal on the reviews and on held-out
/// news, with `top5_k0` unchanged; marginal beat product on both.
///
/// ```
/// use laya_runtime::CompletionRule;
/// assert_eq!(CompletionRule::default(), CompletionRule::Split);
/// assert_eq!("product".parse::<CompletionRule>(), Ok(CompletionRule::Product));
/// assert!("both".parse::<CompletionRule>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompletionRule {
    /// Each completion `(w, i)` scores `P(w)·f_i` with `f_i = min(1, P(i) / M_i)`, where `M_i` is
    /// the word head's mass on the words admissible with `i`; a next word `(w, 0)` scores what is
    /// left of its `P(w)`, `P(w)·max(0, 1 − Σ f_i)` over the `i` it is admissible with (so a
    /// word that starts with nothing typed keeps all of `P(w)`). A word's pairs never score more
    /// than its `P(w)`. No tuning constant.
    Marginal,
    /// `P(w)·P(i)^β`, with the session's completion exponent `β` (1 by default): the two heads
    /// taken as independent.
    Product,
    /// `(w, 0)` scores `P(w)·P(0)`, a completion `P(i)·P(w) / M_i`: the replace head says how
    /// likely the person is mid-word, the word head renormalised over the admissible words which
    /// word. Shows the most completions. No tuning constant.
    Conditional,
    /// A word that continues the typed characters is offered only as a completion: `(w, i)`
    /// scores `P(w)·P(i) / Σ_j P(j)`, the sum over the `i ≥ 1` that `w` is admissible with, and
    /// `(w, 0)` scores 0 (typing its first characters twice, as in "非常非常重视", is rare). Every
    /// other word keeps its `P(w)` as a next word. The word head put `P(w)` on such a word
    /// because the context may end inside it, so that mass goes to the completions, split by
    /// the replace head. No tuning constant.
    #[default]
    Split,
}

impl std::str::FromStr for CompletionRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "product" => Ok(CompletionRule::Product),
            "conditional" => Ok(CompletionRule::Conditional),
            "marginal" => Ok(CompletionRule::Marginal),
            "split" => Ok(CompletionRule::Split),
            other => Err(format!("unknown completion rule `{other}` (expected `marginal`, `split`, `product` or `conditional`)")),
        }
    }
}
