//! `cordon gate`: build the images (the test image, and the agent image from the pinned CLI), run
//! the truth table, print it.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use cordon_proof::gate::{self, GateOptions};

use crate::{image, print, progress, verdict, Ctx};

#[derive(Debug, Args)]
pub struct GateArgs {
    /// Cases run at once.
    #[arg(long, default_value_t = 6)]
    parallel: usize,
    /// Run only the cases whose name contains this.
    #[arg(long)]
    filter: Option<String>,
}

pub async fn run(ctx: &Ctx, args: GateArgs) -> anyhow::Result<ExitCode> {
    let built = image::build(ctx).await?;
    // The C0 rows of the production agent image need it (the pinned CLI, fetched and verified).
    let agent = image::agent(ctx, None).await?;
    let options = GateOptions {
        parallel: args.parallel,
        filter: args.filter,
        agent: Some((&agent).into()),
    };
    // Cases done of total and the case being waited on: the gate takes a while.
    let bar = progress::GateBar::new(ctx.json);
    let report = gate::run_with_progress(&ctx.ctl, &built.id, &options, &|at| bar.update(at)).await;
    bar.finish();
    let report = report.context("running the gate")?;
    print(ctx.json, &report, || report.table())?;
    Ok(verdict(report.ok()))
}
