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

/// The in-container binaries, built by `build.rs` when this binary was and carried in it, so an
/// installed `cordon` needs no source tree.
const EMBEDDED: &[(&str, &[u8])] = &[
    (
        "cordon-init",
        include_bytes!(concat!(env!("OUT_DIR"), "/cordon-init")),
    ),
    (
        "cordon-probe",
        include_bytes!(concat!(env!("OUT_DIR"), "/cordon-probe")),
    ),
    (
        "cordon-egress",
        include_bytes!(concat!(env!("OUT_DIR"), "/cordon-egress")),
    ),
    (
        "claude",
        include_bytes!(concat!(env!("OUT_DIR"), "/claude")),
    ),
    (
        "fake-vendor",
        include_bytes!(concat!(env!("OUT_DIR"), "/fake-vendor")),
    ),
];

/// Where this run's in-container binaries come from: the ones carried here, or a build from
/// `--workspace`.
fn source(ctx: &Ctx) -> BinarySource {
    match &ctx.workspace {
        Some(workspace) => BinarySource::Workspace(workspace.clone()),
        None => BinarySource::Embedded(EMBEDDED),
    }
}

/// Build (or reuse) the test image, a spinner on stderr meanwhile unless `--json`.
pub async fn build(ctx: &Ctx) -> anyhow::Result<BuiltImage> {
    let bar = progress::spinner(ctx.json);
    let built = image::build_image(ctx.ctl.engine(), &source(ctx), &|step| {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What build.rs embeds is every binary the library asks for, each static-pie.
    #[test]
    fn the_embedded_binaries_are_the_ones_the_image_needs() {
        let names: Vec<&str> = EMBEDDED.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, image::BINARY_NAMES);
        for (name, data) in EMBEDDED {
            image::check_static_pie(std::path::Path::new(name), data)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
