//! `cordon image build`, and the image build every other subcommand starts with.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use std::path::PathBuf;

use cordon::image::agent::{self, AgentImage, AgentImageSpec};
use cordon::image::{self, pinned, BinarySource, BuiltImage};

use crate::{print, progress, Ctx};

#[derive(Debug, Subcommand)]
pub enum ImageAction {
    /// Build the static binaries and the test image, or with `--claude-cli` / `--agent` the
    /// production agent image; report its tag and size.
    Build {
        /// Build the agent image from this Claude Code CLI (any `claude` binary, not checked
        /// against the pin).
        #[arg(long)]
        claude_cli: Option<PathBuf>,
        /// Build the agent image from the pinned CLI (fetched with pip and verified).
        #[arg(long, conflicts_with = "claude_cli")]
        agent: bool,
    },
}

/// The in-container binaries, built by `build.rs` when this binary was and carried in it, so an
/// installed `cordon` needs no source tree.
const EMBEDDED: &[(&str, &[u8])] = &[
    (
        "cordon-init",
        include_bytes!(concat!(env!("OUT_DIR"), "/cordon-init")),
    ),
    (
        "cordon-mcp",
        include_bytes!(concat!(env!("OUT_DIR"), "/cordon-mcp")),
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
pub fn binary_source(ctx: &Ctx) -> BinarySource {
    match &ctx.workspace {
        Some(workspace) => BinarySource::Workspace(workspace.clone()),
        None => BinarySource::Embedded(EMBEDDED),
    }
}

/// Build (or reuse) the test image, a spinner on stderr meanwhile unless `--json`.
pub async fn build(ctx: &Ctx) -> anyhow::Result<BuiltImage> {
    let bar = progress::spinner(ctx.json);
    let built = image::build_image(ctx.ctl.engine(), &binary_source(ctx), &|step| {
        bar.set_message(step.to_owned())
    })
    .await;
    bar.finish_and_clear();
    built.context("building the test image")
}

/// Build (or reuse) the production agent image from `cli` (the pinned CLI, fetched and verified,
/// when `None`), a spinner on stderr meanwhile unless `--json`.
pub async fn agent(ctx: &Ctx, cli: Option<PathBuf>) -> anyhow::Result<AgentImage> {
    let bar = progress::spinner(ctx.json);
    let say = |step: &str| bar.set_message(step.to_owned());
    let built = async {
        let cli = match cli {
            Some(path) => path,
            None => {
                let cache = pinned::default_cache(&image::default_workspace());
                pinned::fetch(&pinned::CLAUDE_CLI, &cache, &say)
                    .await
                    .context("fetching the pinned Claude Code CLI")?
            }
        };
        let spec = AgentImageSpec::new(cli, binary_source(ctx));
        agent::build_agent_image(ctx.ctl.engine(), &spec, &say)
            .await
            .context("building the agent image")
    }
    .await;
    bar.finish_and_clear();
    built
}

pub async fn run(ctx: &Ctx, action: ImageAction) -> anyhow::Result<ExitCode> {
    match action {
        ImageAction::Build { claude_cli, agent } if agent || claude_cli.is_some() => {
            let built = self::agent(ctx, claude_cli).await?;
            print(ctx.json, &built, || {
                format!(
                    "{} {} ({} bytes{}, {} ms; exec {})\n",
                    built.built.tag,
                    built.built.id,
                    built.built.size_bytes,
                    if built.built.reused { ", reused" } else { "" },
                    built.built.build_ms,
                    built.exec.join(" ")
                )
            })?;
            Ok(ExitCode::SUCCESS)
        }
        ImageAction::Build { .. } => {
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
