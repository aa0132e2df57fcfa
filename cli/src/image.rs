//! `cordon image build`, and the image build every other subcommand starts with.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use cordon::image::{self, BinarySource, BuiltImage};

use crate::{print, progress, Ctx};

#[derive(Debug, Subcommand)]
pub enum ImageAction {
    /// Build the static binaries and the test image; report its tag and size.
    Build,
}

/// Where this run's in-container binaries come from.
fn source(ctx: &Ctx) -> BinarySource {
    let workspace = ctx
        .workspace
        .clone()
        .unwrap_or_else(image::default_workspace);
    BinarySource::Workspace(workspace)
}

/// Build (or reuse) the test image, a spinner on stderr meanwhile unless `--json`.
pub async fn build(ctx: &Ctx) -> anyhow::Result<BuiltImage> {
    let bar = progress::spinner(ctx.json);
    let built = image::build_image(&ctx.engine, &source(ctx), &|step| {
        bar.set_message(step.to_owned())
    })
    .await;
    bar.finish_and_clear();
    built.context("building the test image")
}

pub async fn run(ctx: &Ctx, action: ImageAction) -> anyhow::Result<ExitCode> {
    match action {
        ImageAction::Build => {
            let built = build(ctx).await?;
            print(ctx.json, &built, || {
                format!(
                    "{} {} ({} bytes{}, {} ms)\n",
                    built.tag,
                    built.id,
                    built.size_bytes,
                    if built.reused { ", reused" } else { "" },
                    built.build_ms
                )
            })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
