//! `invar features`: one `.npy` per utterance plus a manifest, computed in parallel and streamed.

use std::collections::HashSet;
use std::path::PathBuf;

use clap::Args;
use invar_audio::{ChannelSelect, FeatureKind, FrontendConfig, ReadOptions};
use invar_data::{
    extract_features_from, FeatureFormat, FeatureJob, Layout, Shard, Utterance, UtteranceChunks,
    VtlnWarps,
};
use invar_train::ItemProgress;

/// Compute features for every utterance of a corpus into OUT (one .npy each + manifest.tsv).
#[derive(Debug, Args)]
pub struct FeaturesArgs {
    /// Corpus layout: timit, elsdsr, list, kaldi, librispeech or voxceleb (README "Your own data").
    #[arg(long)]
    pub layout: Layout,
    /// The corpus folder, Kaldi data directory, or list file (list).
    pub path: PathBuf,
    /// Run the `cmd |` entries of a Kaldi `wav.scp` (they execute shell commands, so without this
    /// flag a pipe entry is an error naming its line).
    #[arg(long)]
    pub allow_pipes: bool,
    /// Feature kind: spectrogram (the 001 linear spectrogram), logmel or mfcc (Kaldi defaults).
    #[arg(long)]
    pub kind: FeatureKind,
    /// Output folder. A folder holding an interrupted run of the same job (corpus, front-end,
    /// shards) is continued; any other non-empty folder is refused unless --force.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (not with --shard).
    #[arg(long, conflicts_with = "shard")]
    pub force: bool,
    /// How to store the matrices: npy (one <id>.npy each) or kaldi (feats.ark + feats.scp, binary
    /// float, readable by Kaldi and kaldiio); manifest.tsv and config.json are written either way.
    #[arg(long, default_value = "npy")]
    pub format: FeatureFormat,
    /// Front-end configuration, TOML or JSON (`*.json`): a FrontendConfig, missing fields taking
    /// the kind's defaults. `--kind` and the front-end flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Only this shard of the utterances, K/N with 1 <= K <= N (e.g. a Slurm array task); the
    /// last shard to finish merges the shard manifests into manifest.tsv. Default: all of them.
    #[arg(long)]
    pub shard: Option<String>,
    /// Refuse files whose sample rate differs from the front-end's instead of resampling them.
    #[arg(long)]
    pub no_resample: bool,
    /// Use this channel (from 0) of multi-channel files instead of their mix.
    #[arg(long)]
    pub channel: Option<usize>,
    /// Per-speaker VTLN warp factors: a file of `speaker warp` lines (Kaldi's spk2warp, as
    /// `invar vtln` writes); each speaker's mel bank is warped by its factor, and a speaker
    /// missing from the file is an error. Recorded in OUT/config.json.
    #[arg(long)]
    pub vtln_warps: Option<PathBuf>,
    /// Utterances listed at a time: the corpus is streamed from disk in chunks of this many
    /// (each computed in parallel), so memory does not grow with the corpus; the output does not
    /// depend on it.
    #[arg(long, default_value_t = invar_data::EXTRACT_CHUNK)]
    pub chunk_utterances: usize,
    /// Write the summary as JSON here (default: OUT/results.json, or results.K-of-N.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Last, so its help heading covers only its own flags.
    #[command(flatten)]
    pub frontend: FrontendFlags,
}

/// Per-utterance normalisation, as a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CmvnArg {
    /// No normalisation.
    None,
    /// Subtract each utterance's mean (CMN).
    Mean,
    /// Subtract the mean and divide by the standard deviation (CMVN).
    Meanvar,
}

/// The front-end's most used settings as flags. Each overrides `--config` (and, without one, the
/// kind's defaults: Kaldi's `compute-mfcc-feats` / `compute-fbank-feats`, or 001's spectrogram).
#[derive(Debug, Args)]
#[command(next_help_heading = "Front-end (override --config and the kind's defaults)")]
pub struct FrontendFlags {
    /// Append Δ (1) or Δ + ΔΔ (2), Kaldi's add-deltas over ±2 frames [default: 0]
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub deltas: Option<u8>,
    /// Per-utterance normalisation after deltas [default: none]
    #[arg(long, value_enum)]
    pub cmvn: Option<CmvnArg>,
    /// Frame shift in ms [default: 10; spectrogram 8]
    #[arg(long)]
    pub frame_shift_ms: Option<f32>,
    /// Frame length in ms [default: 25; spectrogram 16]
    #[arg(long)]
    pub frame_length_ms: Option<f32>,
    /// Cepstra kept (mfcc) [default: 13]
    #[arg(long)]
    pub num_ceps: Option<usize>,
    /// Mel bins (mfcc, logmel) [default: 23]
    #[arg(long)]
    pub num_mel_bins: Option<usize>,
    /// Sample rate the front-end works at; audio at another rate is resampled [default: 16000]
    #[arg(long)]
    pub sample_rate: Option<u32>,
    /// Standard deviation of Gaussian dither, seeded per utterance (0 = off) [default: 0]
    #[arg(long)]
    pub dither: Option<f32>,
}

impl FrontendFlags {
    /// Lays the flags given over `config`.
    pub fn apply(&self, config: &mut FrontendConfig) {
        if let Some(order) = self.deltas {
            config.deltas.order = usize::from(order);
        }
        if let Some(cmvn) = self.cmvn {
            config.cmvn.mean = cmvn != CmvnArg::None;
            config.cmvn.variance = cmvn == CmvnArg::Meanvar;
        }
        if let Some(v) = self.frame_shift_ms {
            config.frame.shift_ms = v;
        }
        if let Some(v) = self.frame_length_ms {
            config.frame.length_ms = v;
        }
        if let Some(v) = self.num_ceps {
            config.mfcc.num_ceps = v;
        }
        if let Some(v) = self.num_mel_bins {
            config.mel.num_bins = v;
        }
        if let Some(v) = self.sample_rate {
            config.sample_rate = v;
        }
        if let Some(v) = self.dither {
            config.frame.dither = v;
        }
    }
}

pub fn run(args: FeaturesArgs) -> anyhow::Result<()> {
    let mut frontend: FrontendConfig = crate::config_file::read_or(args.config.as_deref(), || {
        FrontendConfig::for_kind(args.kind)
    })?;
    frontend.kind = args.kind;
    args.frontend.apply(&mut frontend);
    frontend.validate()?;
    let shard = Shard::parse_or_all(args.shard.as_deref())?;
    // Only the audio is used: alignments and transcripts are not read. Utterances are streamed
    // a chunk at a time (issue #24); a first pass counts this shard's and checks its speakers'
    // warp factors before anything is written.
    let corpus = crate::corpus::open_audio_only(args.layout, &args.path, args.allow_pipes)?;
    let chunk = args.chunk_utterances.max(1);
    let warps = match &args.vtln_warps {
        Some(file) => Some((
            file,
            VtlnWarps::read(file)?,
            invar_audio::Frontend::new(&frontend)?,
        )),
        None => None,
    };
    let mut mine = 0usize;
    let mut checked: HashSet<String> = HashSet::new();
    let mut warp_error = None;
    corpus.for_each_chunk(chunk, &mut |first, utts| {
        let in_shard = utts
            .iter()
            .enumerate()
            .filter(|(i, _)| shard.contains(first + i))
            .map(|(_, u)| u);
        mine += in_shard.clone().count();
        if let (Some((file, warps, base)), None) = (&warps, &warp_error) {
            let new: Vec<&Utterance> = in_shard.filter(|u| !checked.contains(&u.speaker)).collect();
            match warps.frontends(base, new.iter().copied(), &file.display().to_string()) {
                Ok(_) => checked.extend(new.iter().map(|u| u.speaker.clone())),
                Err(e) => warp_error = Some(e),
            }
        }
        Ok(())
    })?;
    if let (Some(e), Some(file)) = (warp_error, &args.vtln_warps) {
        return Err(anyhow::Error::new(e).context(format!("--vtln-warps {}", file.display())));
    }
    drop(checked);
    let vtln_warps = warps.map(|(_, w, _)| w);
    let job = FeatureJob {
        layout: args.layout,
        corpus: args.path.clone(),
        frontend,
        read: ReadOptions {
            channel: args
                .channel
                .map_or(ChannelSelect::Mix, ChannelSelect::Index),
            target_rate: None,
            resample: !args.no_resample,
        },
        shards: shard.count,
        format: args.format,
        vtln_warps,
    };
    let identity = serde_json::to_value(&job)?;
    let _out = crate::out_dir::claim_job(
        &args.out,
        "features",
        &identity,
        shard,
        args.force,
        &[args.path.as_path()],
    )?;
    tracing::info!(
        "{} utterances in shard {}/{} of {} ({} layout) → {}",
        mine,
        shard.index + 1,
        shard.count,
        args.path.display(),
        args.layout,
        args.out.display()
    );
    let progress = ItemProgress::new(mine as u64, "features");
    let summary =
        extract_features_from(&corpus, chunk, &job, &args.out, shard, &|_| progress.inc())?;
    progress.finish();

    println!("features ({}) → {}", args.kind, args.out.display());
    println!("{:<24} {:>12}", "utterances", summary.utterances);
    println!("{:<24} {:>12}", "  computed", summary.computed);
    println!("{:<24} {:>12}", "  kept from earlier run", summary.resumed);
    println!("{:<24} {:>12}", "frames", summary.frames);
    println!("{:<24} {:>12}", "dims", summary.dims);
    println!(
        "{:<24} {:>12}",
        "manifest complete",
        if summary.complete {
            "yes"
        } else {
            "no (shards missing)"
        }
    );
    let json = crate::gmm::results_path(args.json, &args.out, shard);
    invar_io::write_json(&json, &summary)?;
    tracing::info!("summary written to {}", json.display());
    Ok(())
}
