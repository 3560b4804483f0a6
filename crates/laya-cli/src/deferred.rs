//! Subcommands whose arguments are built only when they are the one run.

use clap::{ArgMatches, Args, Command, Error, FromArgMatches};

/// `T`'s arguments, added to its subcommand only when the command line names that subcommand
/// ([`Command::defer`]): clap building every subcommand's arguments and help at each start was
/// 0.2 ms of every `laya` process, a tenth of a cold start (docs/architecture.md, "The process
/// itself"). Help and errors are the same.
///
/// ```ignore
/// #[derive(clap::Subcommand)]
/// enum Command {
///     /// Predict candidates.
///     Predict(Deferred<predict::Args>),
/// }
/// ```
pub struct Deferred<T>(pub T);

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches(matches).map(Deferred)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn augment_args(cmd: Command) -> Command {
        cmd.defer(|cmd| keeping_about(cmd, T::augment_args))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        cmd.defer(|cmd| keeping_about(cmd, T::augment_args_for_update))
    }

    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
}

/// `augment(cmd)` with `cmd`'s own description kept: built late, a flattened group's doc
/// comment would otherwise replace the subcommand's (which the derive sets before the
/// arguments).
fn keeping_about(cmd: Command, augment: fn(Command) -> Command) -> Command {
    let (about, long_about) = (cmd.get_about().cloned(), cmd.get_long_about().cloned());
    let cmd = augment(cmd);
    let cmd = match about {
        Some(about) => cmd.about(about),
        None => cmd.about(None::<&str>),
    };
    match long_about {
        Some(long_about) => cmd.long_about(long_about),
        None => cmd.long_about(None::<&str>),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser, Subcommand};

    /// Options shared by several commands, with a doc comment of their own.
    #[derive(clap::Args, Debug, PartialEq)]
    struct Shared {
        /// A shared flag.
        #[arg(long)]
        shared: bool,
    }

    /// The arguments' own doc comment.
    #[derive(clap::Args, Debug, PartialEq)]
    struct Opts {
        /// A count.
        #[arg(long, default_value_t = 3)]
        count: u32,
        #[command(flatten)]
        shared: Shared,
    }

    #[derive(Parser)]
    struct Eager {
        #[command(subcommand)]
        command: EagerCommand,
    }

    #[derive(Subcommand)]
    enum EagerCommand {
        /// Does one thing.
        Go(Opts),
    }

    #[derive(Parser)]
    struct Lazy {
        #[command(subcommand)]
        command: LazyCommand,
    }

    #[derive(Subcommand)]
    enum LazyCommand {
        /// Does one thing.
        Go(Deferred<Opts>),
    }

    /// The same values, the same help (the subcommand's description, not the flattened
    /// group's) and the same errors as without deferring.
    #[test]
    fn a_deferred_subcommand_parses_and_helps_as_an_eager_one() {
        for argv in [&["x", "go", "--count", "5", "--shared"][..], &["x", "go"]] {
            let EagerCommand::Go(a) = Eager::try_parse_from(argv).unwrap().command;
            let LazyCommand::Go(Deferred(b)) = Lazy::try_parse_from(argv).unwrap().command;
            assert_eq!(a, b);
        }
        for argv in [&["x", "go", "--help"][..], &["x", "go", "-h"], &["x", "help", "go"], &["x", "go", "--bogus"], &["x", "--help"]] {
            let eager = Eager::try_parse_from(argv).err().map(|e| e.to_string());
            let lazy = Lazy::try_parse_from(argv).err().map(|e| e.to_string());
            assert!(eager.is_some(), "{argv:?}");
            assert_eq!(eager, lazy, "{argv:?}");
        }
        let help = Lazy::try_parse_from(["x", "go", "--help"]).err().unwrap().to_string();
        assert!(help.starts_with("Does one thing") && help.contains("--count") && help.contains("--shared"), "{help}");
    }

    /// Every subcommand of `laya` has its arguments deferred: none is built with the command.
    #[test]
    fn laya_builds_no_subcommand_s_arguments_up_front() {
        use clap::CommandFactory;
        let cli = crate::Cli::command();
        assert!(cli.find_subcommand("predict").is_some() && cli.find_subcommand("bench").is_some());
        for sub in cli.get_subcommands() {
            assert_eq!(sub.get_arguments().count(), 0, "{} builds its arguments up front", sub.get_name());
        }
    }
}
