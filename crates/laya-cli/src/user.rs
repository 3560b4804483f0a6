//! `laya user`: look into, edit and export a user file (docs/personalisation.md).

use std::io::BufRead;
use std::path::{Path, PathBuf};

use laya_runtime::{Session, User};

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Summary, the most used words and the blocklist.
    Show {
        /// The user file.
        file: PathBuf,
        /// How many of the most used words to list.
        #[arg(long, default_value_t = 20)]
        top: usize,
    },
    /// Forget words: their counts and every pair they are in.
    Forget {
        file: PathBuf,
        #[arg(required = true)]
        words: Vec<String>,
    },
    /// Forget everything learned (the blocklist stays).
    Clear { file: PathBuf },
    /// Never suggest these words (whatever the model or the history says) and forget them.
    Block {
        file: PathBuf,
        /// Words to block; with --from, also every line of that file.
        words: Vec<String>,
        /// A file with one word per line (a blocklist kept by hand).
        #[arg(long)]
        from: Option<PathBuf>,
    },
    /// Suggest these words again.
    Unblock {
        file: PathBuf,
        #[arg(required = true)]
        words: Vec<String>,
    },
    /// Everything in the file as one JSON object (words, pairs, blocklist) on stdout.
    Export { file: PathBuf },
    /// Learn the lines of a text file, in order, as if the person had committed them.
    Learn {
        file: PathBuf,
        /// The text to learn, one commit per line.
        #[arg(long)]
        text: PathBuf,
        /// The model whose lexicon cuts Han text into words (default: the embedded model).
        #[arg(long)]
        model: Option<PathBuf>,
    },
}

/// Opens `path` for a command: a file that cannot be read is set aside with a warning.
fn open(path: &Path) -> Result<User, CliError> {
    let opened = User::open(path)?;
    if let Some(aside) = &opened.set_aside {
        eprintln!("laya: warning: user file {}: {aside}", path.display());
    }
    Ok(opened.user)
}

/// Opens, changes and saves; prints what the change returns.
fn edit(path: &Path, change: impl FnOnce(&User) -> Result<String, CliError>) -> Result<(), CliError> {
    let user = open(path)?;
    let said = change(&user)?;
    user.save(path)?;
    outln!("{said}");
    Ok(())
}

pub fn run(args: Args) -> Result<(), CliError> {
    match args.action {
        Action::Show { file, top } => {
            if !file.exists() {
                return Err(CliError(format!("no user file at {}", file.display())));
            }
            let user = open(&file)?;
            let u = user.read();
            let size = std::fs::metadata(&file).map_or(0, |m| m.len());
            outln!("user file        {} ({size} bytes, format version {})", file.display(), laya_runtime::USER_FILE_VERSION);
            outln!("words            {} (capacity {})", u.len(), u.capacity());
            outln!("pairs            {}", u.pairs());
            outln!("words learned    {} (half-life {} words)", u.clock(), u.half_life());
            let blocked: Vec<&str> = u.blocklist().collect();
            outln!("blocked          {}", if blocked.is_empty() { "none".to_string() } else { blocked.join(" ") });
            outln!();
            outln!("{:>10}  word", "count");
            for (w, c) in u.words().into_iter().take(top) {
                outln!("{c:>10.2}  {w}");
            }
        }
        Action::Forget { file, words } => edit(&file, |u| {
            let mut w = u.write();
            Ok(words
                .iter()
                .map(|x| format!("{x}\t{}", if w.forget(x) { "forgotten" } else { "not learned" }))
                .collect::<Vec<_>>()
                .join("\n"))
        })?,
        Action::Clear { file } => edit(&file, |u| {
            let n = u.read().len();
            u.write().clear();
            Ok(format!("forgot {n} words"))
        })?,
        Action::Block { file, mut words, from } => {
            if let Some(list) = &from {
                let f = std::fs::File::open(list).map_err(|e| CliError(format!("cannot read {}: {e}", list.display())))?;
                for line in std::io::BufReader::new(f).lines() {
                    let line = line.map_err(|e| CliError(format!("cannot read {}: {e}", list.display())))?;
                    let w = line.trim();
                    if !w.is_empty() && !w.starts_with('#') {
                        words.push(w.to_string());
                    }
                }
            }
            if words.is_empty() {
                return Err(CliError("nothing to block: give words or --from FILE".into()));
            }
            edit(&file, |u| {
                let mut w = u.write();
                let new = words.iter().filter(|x| w.block(x)).count();
                Ok(format!("blocked {new} new words ({} in the blocklist)", w.blocklist().count()))
            })?
        }
        Action::Unblock { file, words } => edit(&file, |u| {
            let mut w = u.write();
            Ok(words
                .iter()
                .map(|x| format!("{x}\t{}", if w.unblock(x) { "unblocked" } else { "not blocked" }))
                .collect::<Vec<_>>()
                .join("\n"))
        })?,
        Action::Export { file } => {
            if !file.exists() {
                return Err(CliError(format!("no user file at {}", file.display())));
            }
            let user = open(&file)?;
            let u = user.read();
            let words: Vec<_> = u.words().into_iter().map(|(w, c)| serde_json::json!({ "word": w, "count": c })).collect();
            let pairs: Vec<_> =
                u.pair_list().into_iter().map(|(a, b, c)| serde_json::json!({ "first": a, "second": b, "count": c })).collect();
            let blocked: Vec<&str> = u.blocklist().collect();
            let out = serde_json::json!({
                "version": laya_runtime::USER_FILE_VERSION,
                "words_learned": u.clock(),
                "half_life": u.half_life(),
                "capacity": u.capacity(),
                "words": words,
                "pairs": pairs,
                "blocked": blocked,
            });
            outln!("{}", serde_json::to_string_pretty(&out)?);
        }
        Action::Learn { file, text, model } => {
            let mut session = Session::new(crate::load_model(model.as_deref())?);
            session.set_user(open(&file)?);
            let f = std::fs::File::open(&text).map_err(|e| CliError(format!("cannot read {}: {e}", text.display())))?;
            let (mut lines, mut words) = (0usize, 0usize);
            let mut spent = std::time::Duration::ZERO;
            for line in std::io::BufReader::new(f).lines() {
                let line = line.map_err(|e| CliError(format!("cannot read {}: {e}", text.display())))?;
                let t = std::time::Instant::now();
                words += session.learn(&line);
                spent += t.elapsed();
                lines += 1;
            }
            session.user().save(&file)?;
            let u = session.user().read();
            outln!("learned {words} words from {lines} lines; the file holds {} words and {} pairs", u.len(), u.pairs());
            outln!(
                "learning took {:.1} µs per line ({:.2} µs per word)",
                spent.as_secs_f64() * 1e6 / lines.max(1) as f64,
                spent.as_secs_f64() * 1e6 / words.max(1) as f64
            );
        }
    }
    Ok(())
}
