//! The synthetic market's flags of `tidemark publish` (`tidemark_market::market`).

use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use tidemark_market::{Delays, MarketConfig, Shift};
use tidemark_wire::parse_duration;

#[derive(clap::Args)]
pub struct MarketArgs {
    /// Synthetic market: transactions (bids) per second of event time
    #[arg(long, default_value_t = 1000.0, value_parser = positive)]
    tps: f64,
    /// Synthetic market: seed of its random choices (the same seed, the same events)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Share of bids that win an impression
    #[arg(long, default_value_t = 0.3, value_parser = share)]
    impression_rate: f64,
    /// Share of events sent twice, like a publisher retrying
    #[arg(long, default_value_t = 0.01, value_parser = share)]
    duplicate_rate: f64,
    /// Click window the synthetic delays are scaled to
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    click_window: Duration,
    /// Short install window the synthetic delays are scaled to
    #[arg(long, value_parser = parse_duration, default_value = "24h")]
    install_short: Duration,
    /// Custom event types the market also sends after clicks
    #[arg(long, value_parser = custom_type)]
    custom_types: Vec<String>,
    /// Synthetic market: events go out up to this much event time late (bounded disorder)
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    disorder: Duration,
    /// Synthetic market: a duplicate's ts differs from the original's by up to this
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    duplicate_shift: Duration,
    /// Synthetic market: persons behind the transactions (each with its own activity and click and install propensities; events carry `user`)
    #[arg(long, default_value_t = 10_000)]
    persons: u32,
    /// Synthetic market: persons use 1-3 devices (`user` `p<k>`, `p<k>.1`, `p<k>.2`), members log
    /// in (`ids.member`), a few events share a carrier IP or a QA test device (SPEC 11)
    #[arg(long)]
    linked: bool,
    #[command(flatten)]
    delays: DelayArgs,
}

/// The market's install delays and its shift (`tidemark_market::delays`),
/// in `tidemark publish` and `tidemark demo`.
#[derive(clap::Args)]
pub struct DelayArgs {
    /// Synthetic market: install delays, by app and exchange: `default` (one exponential,
    /// ~85% of installs in the short window) or `criteo` (Criteo-like: ~58% after the short
    /// window, a tail past the long one)
    #[arg(long, default_value = "default", value_parser = delays())]
    delays: Delays,
    /// Synthetic market: event time after its start from which a fifth of the apps
    /// shift (see --shift), e.g. 40m
    #[arg(long, value_parser = parse_duration)]
    shift_at: Option<Duration>,
    /// With --shift-at: what changes for the shifted apps: `propensity` (their install logit
    /// +1.5, the default) or `delays` (their install delays doubled)
    #[arg(long, requires = "shift_at", value_parser = shift())]
    shift: Option<Shift>,
}

impl DelayArgs {
    /// The preset, the shift's time after the start (ms) and its kind.
    pub fn parts(&self) -> (Delays, Option<i64>, Shift) {
        let at = self.shift_at.map(|d| d.as_millis() as i64);
        (self.delays, at, self.shift.unwrap_or_default())
    }
}

fn delays() -> impl TypedValueParser<Value = Delays> {
    PossibleValuesParser::new(Delays::NAMES).map(|s| s.parse::<Delays>().expect("a name it lists"))
}

fn shift() -> impl TypedValueParser<Value = Shift> {
    PossibleValuesParser::new(Shift::NAMES).map(|s| s.parse::<Shift>().expect("a name it lists"))
}

impl MarketArgs {
    /// The market these flags describe.
    pub fn config(self) -> MarketConfig {
        let (delays, shift_at_ms, shift) = self.delays.parts();
        MarketConfig {
            seed: self.seed,
            tps: self.tps,
            impression_rate: self.impression_rate,
            duplicate_rate: self.duplicate_rate,
            click_window_ms: self.click_window.as_millis() as i64,
            install_short_ms: self.install_short.as_millis() as i64,
            custom_types: self.custom_types,
            disorder_ms: self.disorder.as_millis() as i64,
            duplicate_shift_ms: self.duplicate_shift.as_millis() as i64,
            persons: self.persons,
            linked: self.linked,
            delays,
            shift_at_ms,
            shift,
            ..MarketConfig::default()
        }
    }
}

fn positive(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    (v > 0.0 && v.is_finite())
        .then_some(v)
        .ok_or("must be a positive number".into())
}

fn share(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    (0.0..=1.0)
        .contains(&v)
        .then_some(v)
        .ok_or("must be between 0 and 1".into())
}

fn custom_type(s: &str) -> Result<String, String> {
    tidemark_wire::Types::new(&[s.to_owned()]).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}
