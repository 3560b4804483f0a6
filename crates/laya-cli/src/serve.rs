//! `laya serve`: the engine as a local JSON service and a typing page (docs/serve.md). This file
//! reads the arguments and builds the shared state; the HTTP service is in `serve/http.rs`.

mod http;
mod reload;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use laya_runtime::{Session, User};

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: crate::ModelChoice,
    /// The user file (docs/personalisation.md): read at start, written back atomically after
    /// every `/v1/learn` and `/v1/forget` that changed it.
    #[arg(long)]
    user: Option<PathBuf>,
    /// Address to listen on. Only this machine can connect unless an address other than a
    /// loopback one is given; port 0 picks a free port (the address is printed on start).
    #[arg(long, default_value = "127.0.0.1:8757")]
    addr: SocketAddr,
    #[command(flatten)]
    tuning: crate::predictors::Tuning,
}

pub fn run(args: Args) -> Result<(), CliError> {
    // Watched from before the first load, so that a file installed during the load is seen.
    let watched = args.model.model.clone().map(reload::Watched::new);
    let model = args.model.load()?;
    let user = match &args.user {
        Some(path) => crate::predict::open_user(path)?,
        None => User::new(),
    };
    let (tuning, mix) = (args.tuning, args.tuning.check()?);
    // Every pooled session is made alike, with the options `laya predict` takes, so a request
    // answers what `laya predict --jsonl` answers for the same context.
    let make = move |model| {
        let mut s = Session::with_max_k(model, http::MAX_K);
        tuning.apply(&mut s, mix);
        s.set_user(user.clone());
        s
    };
    if !args.addr.ip().is_loopback() {
        eprintln!("laya: warning: listening on {}: other machines can reach this service", args.addr);
    }
    let state = http::State::new(model, watched, args.user, Box::new(make));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(http::serve(Arc::new(state), args.addr))
}
