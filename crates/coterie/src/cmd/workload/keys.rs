//! Which locks a workload's requests take: how many names, with what
//! skew (uniform, Zipf, a ring of neighbours, a sweep), how many at once;
//! each client drawing from its own seeded generator.

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Which locks a workload's requests take (`--names`, `--skew`,
/// `--per-request`, `--ring`, `-n`).
#[derive(clap::Args, Clone, Debug)]
pub struct ChoiceArgs {
    /// Locks the requests spread over: `r0` .. `rK-1` (1: the `default`
    /// lock alone).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    names: u32,
    /// What the locks' names start with, before their number (`r`: `r0`
    /// .. `rK-1`): another prefix takes locks no earlier run took.
    #[arg(long, default_value = "r", value_parser = parse_prefix)]
    name_prefix: String,
    /// Locks each request takes at once, all or none, in name order.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(super) per_request: u32,
    /// How requests pick names: `uniform`, `zipf:S` (the name of rank r
    /// drawn with weight 1/r^S: S = 1 is a classic hot-key skew), or
    /// `sweep` (the clients walk through the names in turn, each name
    /// once per lap: every name used once when --requests times the
    /// clients is --names).
    #[arg(long, default_value = "uniform", value_parser = Skew::parse)]
    skew: Skew,
    /// Each client takes its own --per-request neighbouring names on a ring
    /// of the --names names (client i: names i, i+1, ...): the dining
    /// philosophers with --names 5 --per-request 2 and five clients.
    #[arg(long, conflicts_with = "skew")]
    ring: bool,
    /// Ask for one of K permits of each lock (a counting semaphore).
    #[arg(short = 'n', long = "permits", default_value_t = 0)]
    permits: u32,
    /// Seed of the clients' draws (each client draws from seed + its
    /// number), so a run's requests can be made again.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl ChoiceArgs {
    /// The choice, checked.
    pub fn choice(&self) -> Result<Choice> {
        if self.per_request > self.names {
            bail!(
                "--per-request {} is more than the {} lock(s) of --names",
                self.per_request,
                self.names
            );
        }
        Ok(Choice {
            names: self.names,
            prefix: self.name_prefix.clone(),
            per_request: self.per_request,
            skew: if self.ring { Skew::Ring } else { self.skew },
            permits: self.permits,
            seed: self.seed,
        })
    }
}

/// A `--name-prefix`: a lock name once a number follows it.
fn parse_prefix(s: &str) -> Result<String, String> {
    coterie_core::Name::new(&format!("{s}0")).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

/// How requests pick their names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Skew {
    /// Every name alike.
    Uniform,
    /// The name of rank r with weight 1/r^S.
    Zipf(f64),
    /// Each client its own neighbours on a ring.
    Ring,
    /// The clients take the names in turn, each once a lap.
    Sweep,
}

impl Skew {
    /// Parses `uniform`, `sweep` or `zipf:S`.
    pub fn parse(text: &str) -> Result<Skew, String> {
        match text.split_once(':') {
            None if text == "uniform" => Ok(Skew::Uniform),
            None if text == "sweep" => Ok(Skew::Sweep),
            Some(("zipf", s)) => match s.parse::<f64>() {
                Ok(s) if s.is_finite() && s >= 0.0 => Ok(Skew::Zipf(s)),
                _ => Err(format!("zipf:{s}: the exponent is a number of 0 or more")),
            },
            _ => Err(format!("{text:?} is not a skew: `uniform`, `sweep` or `zipf:S`")),
        }
    }
}

/// Which locks a workload's requests take.
#[derive(Clone, Debug)]
pub struct Choice {
    /// Locks in play (1: the `default` lock alone).
    pub names: u32,
    /// What their names start with, before their number.
    pub prefix: String,
    /// Locks each request takes at once.
    pub per_request: u32,
    /// How they are picked.
    pub skew: Skew,
    /// Permits asked for (0: the cluster's `count`).
    pub permits: u32,
    /// The clients' draws' seed.
    pub seed: u64,
}

impl Default for Choice {
    /// The `default` lock, every time.
    fn default() -> Choice {
        Choice {
            names: 1,
            prefix: "r".into(),
            per_request: 1,
            skew: Skew::Uniform,
            permits: 0,
            seed: 1,
        }
    }
}

impl Choice {
    /// The `i`th lock's name.
    pub fn name(&self, i: u32) -> String {
        if self.names <= 1 {
            coterie_core::Name::DEFAULT.to_string()
        } else {
            format!("{}{i}", self.prefix)
        }
    }

    /// What client number `client` of `clients` draws its requests from.
    pub(super) fn picker(&self, client: u64, clients: u64) -> Picker {
        let cdf = match self.skew {
            Skew::Zipf(s) => {
                let mut total = 0.0;
                let mut cdf: Vec<f64> = (1..=self.names)
                    .map(|r| {
                        total += 1.0 / f64::from(r).powf(s);
                        total
                    })
                    .collect();
                cdf.iter_mut().for_each(|c| *c /= total);
                Some(cdf)
            }
            _ => None,
        };
        Picker {
            choice: self.clone(),
            client,
            clients: clients.max(1),
            made: 0,
            cdf,
            rng: ChaCha8Rng::seed_from_u64(self.seed.wrapping_add(client)),
        }
    }
}

/// One client's draws.
pub(super) struct Picker {
    choice: Choice,
    client: u64,
    /// How many clients the run has.
    clients: u64,
    /// Requests drawn so far.
    made: u64,
    /// The cumulative weights, for a Zipf skew.
    cdf: Option<Vec<f64>>,
    rng: ChaCha8Rng,
}

impl Picker {
    /// The names of the next request, in name order.
    pub(super) fn next(&mut self) -> Vec<String> {
        let Choice { names: k, per_request: m, skew, .. } = self.choice;
        let mut picked: Vec<u32> = Vec::with_capacity(m as usize);
        let made = self.made;
        self.made += 1;
        if skew == Skew::Ring || skew == Skew::Sweep {
            // A ring: the client's own neighbours; a sweep: the next M
            // names of the lap, the clients taking turns.
            let start = match skew {
                Skew::Ring => self.client % u64::from(k),
                _ => (self.client + made * self.clients) * u64::from(m) % u64::from(k),
            } as u32;
            picked.extend((0..m).map(|j| (start + j) % k));
            picked.dedup();
        } else {
            // Distinct draws; after many repeats (a steep skew), the next
            // names in rank order fill in.
            let mut tries = 0;
            while picked.len() < m as usize {
                let i = match &self.cdf {
                    Some(cdf) if tries < 64 * m => {
                        let u: f64 = self.rng.random();
                        cdf.partition_point(|&c| c < u).min(k as usize - 1) as u32
                    }
                    Some(_) => (0..k).find(|i| !picked.contains(i)).unwrap_or(0),
                    None => self.rng.random_range(0..k),
                };
                tries += 1;
                if !picked.contains(&i) {
                    picked.push(i);
                }
            }
        }
        let mut names: Vec<String> = picked.into_iter().map(|i| self.choice.name(i)).collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skews_parse_and_refuse_nonsense() {
        assert_eq!(Skew::parse("uniform"), Ok(Skew::Uniform));
        assert_eq!(Skew::parse("zipf:1.2"), Ok(Skew::Zipf(1.2)));
        assert!(Skew::parse("zipf:-1").is_err());
        assert!(Skew::parse("zipf").is_err());
        assert!(Skew::parse("pareto:1").is_err());
    }

    #[test]
    fn requests_take_distinct_names_in_order() {
        let choice =
            Choice { names: 10, per_request: 3, skew: Skew::Zipf(2.0), ..Choice::default() };
        let mut p = choice.picker(0, 1);
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..2000 {
            let names = p.next();
            assert_eq!(names.len(), 3);
            assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
            for n in names {
                *counts.entry(n).or_insert(0) += 1;
            }
        }
        assert!(counts["r0"] > counts["r9"] * 3, "a skew: {counts:?}");
    }

    #[test]
    fn on_a_ring_each_client_takes_its_neighbours() {
        let choice = Choice { names: 5, per_request: 2, skew: Skew::Ring, ..Choice::default() };
        assert_eq!(choice.picker(0, 5).next(), ["r0", "r1"]);
        assert_eq!(choice.picker(4, 5).next(), ["r0", "r4"]);
        assert_eq!(Choice::default().picker(3, 5).next(), ["default"]);
    }

    #[test]
    fn a_sweep_takes_every_name_once_a_lap() {
        let choice = Choice { names: 6, per_request: 1, skew: Skew::Sweep, ..Choice::default() };
        let mut seen: Vec<String> = Vec::new();
        let mut pickers: Vec<Picker> = (0..3).map(|c| choice.picker(c, 3)).collect();
        for _ in 0..2 {
            for p in &mut pickers {
                seen.extend(p.next());
            }
        }
        seen.sort();
        assert_eq!(seen, ["r0", "r1", "r2", "r3", "r4", "r5"]);
    }
}
