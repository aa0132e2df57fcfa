//! `cordon doctor`: the engine and what it gives a hardened container.

use std::process::ExitCode;

use anyhow::Context;
use cordon_proof::doctor;

use crate::{image, print, verdict, Ctx};

pub async fn run(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let built = image::build(ctx).await?;
    let report = doctor::run(&ctx.ctl, &built.id)
        .await
        .context("running doctor")?;
    print(ctx.json, &report, || report.text())?;
    Ok(verdict(report.ok))
}
