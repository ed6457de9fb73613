//! The workload schedule (design.md §3): T clients arriving as a Poisson
//! ramp, each with its class and its own seeded random generator that draws
//! session lengths, think times, templates and parameters in a fixed order,
//! so a seed fixes every client's script whatever the backend's timing.

use super::chacha::ChaCha8;
use super::model::Class;
use super::workload::Workload;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

/// One client's script: who it is and its private generator.
#[derive(Clone, Debug)]
pub struct Client {
    /// Its class.
    pub class: Class,
    /// When it arrives, seconds from run start (already time-scaled).
    pub arrival_s: f64,
    rng: ChaCha8,
    /// Draws the retry backoffs only, so that how often a client fails
    /// (which depends on the backend's timing) never shifts its script.
    /// Made from `retry_seed` at the first failure: most clients never
    /// fail, and a generator's state is 112 bytes (T of them at fleet scale).
    retry: Option<Box<ChaCha8>>,
    retry_seed: u64,
    /// Consecutive failed attempts since the last completed session.
    failures: u32,
}

/// One query a client is about to send.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueryDraw {
    /// Template index in the workload.
    pub template: usize,
    /// Value bound to `$1` (0 when the template has no parameter).
    pub param: i64,
    /// Simulated CPU demand in seconds (template cost, jittered +-25%).
    pub demand_s: f64,
}

/// Builds the T clients: exactly round(T x P%) Premium clients, shuffled;
/// arrivals are a Poisson process conditioned on T arrivals within the ramp
/// (sorted uniform times), scaled by `time_scale`.
pub fn clients(total: u32, premium_pct: u32, ramp_s: f64, seed: u64) -> Vec<Client> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let premium = ((u64::from(total) * u64::from(premium_pct) + 50) / 100) as usize;
    let mut classes: Vec<Class> = (0..total as usize).map(|i| if i < premium { Class::P } else { Class::F }).collect();
    classes.shuffle(&mut rng);
    let mut arrivals: Vec<f64> = (0..total).map(|_| rng.gen::<f64>() * ramp_s).collect();
    arrivals.sort_by(f64::total_cmp);
    classes
        .into_iter()
        .zip(arrivals)
        .enumerate()
        .map(|(i, (class, arrival_s))| {
            let own = seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1));
            Client {
                class,
                arrival_s,
                rng: ChaCha8::seed_from_u64(own),
                retry: None,
                retry_seed: own.rotate_left(17),
                failures: 0,
            }
        })
        .collect()
}

fn exp_s(rng: &mut ChaCha8, mean_ms: f64) -> f64 {
    if mean_ms == 0.0 {
        return 0.0; // a closed population: no pause
    }
    Exp::new(1000.0 / mean_ms).expect("validated non-negative mean").sample(rng)
}

impl Client {
    /// Think time before the next session, seconds (exponential).
    pub fn between_s(&mut self, w: &Workload) -> f64 {
        exp_s(&mut self.rng, w.session.between_ms)
    }

    /// The wait before retrying after a failed attempt (a broken session,
    /// a failed connect, no replica to route to), seconds: exponential
    /// backoff with jitter ([`ClientShape::backoff_s`]).
    ///
    /// [`ClientShape::backoff_s`]: super::workload::ClientShape::backoff_s
    pub fn backoff_s(&mut self, w: &Workload) -> f64 {
        let s = w.client.backoff_s(self.failures, self.retry_draw());
        self.failures = self.failures.saturating_add(1);
        s
    }

    /// The next draw of the retry generator, made at its first use.
    fn retry_draw(&mut self) -> f64 {
        let seed = self.retry_seed;
        self.retry.get_or_insert_with(|| Box::new(ChaCha8::seed_from_u64(seed))).gen::<f64>()
    }

    /// A session completed: the next failure backs off from the start.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Number of queries in the next session (uniform).
    pub fn session_len(&mut self, w: &Workload) -> u32 {
        self.rng.gen_range(w.session.queries_min..=w.session.queries_max)
    }

    /// Think time between two queries of a session, seconds (exponential).
    pub fn think_s(&mut self, w: &Workload) -> f64 {
        exp_s(&mut self.rng, w.session.think_ms)
    }

    /// The next query: template by weight, parameter, simulated demand.
    pub fn query(&mut self, w: &Workload) -> QueryDraw {
        let templates = w.templates(self.class);
        let total: f64 = templates.iter().map(|(_, wt)| wt).sum();
        let mut x = self.rng.gen::<f64>() * total;
        let mut template = templates[templates.len() - 1].0;
        for (i, wt) in &templates {
            if x < *wt {
                template = *i;
                break;
            }
            x -= wt;
        }
        let q = &w.query[template];
        let param = if q.key_range > 0 { self.rng.gen_range(1..=q.key_range) as i64 } else { 0 };
        let jitter = self.rng.gen_range(0.75..1.25);
        QueryDraw { template, param, demand_s: q.cpu_ms * jitter / 1000.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_exact_and_arrivals_sorted_within_ramp() {
        let c = clients(1000, 25, 60.0, 7);
        assert_eq!(c.iter().filter(|c| c.class == Class::P).count(), 250);
        assert!(c.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        assert!(c.iter().all(|c| (0.0..60.0).contains(&c.arrival_s)));
    }

    #[test]
    fn same_seed_same_script_other_seed_differs() {
        let w = crate::core::workload::Workload::parse(include_str!("../../workloads/analytics.toml")).unwrap();
        let draw = |seed| {
            let mut c = clients(10, 50, 60.0, seed);
            c.iter_mut().map(|c| (c.arrival_s, c.between_s(&w), c.query(&w))).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
    }

    #[test]
    fn backoffs_grow_reset_on_success_and_never_shift_the_script() {
        let w = crate::core::workload::Workload::parse(include_str!("../../workloads/analytics.toml")).unwrap();
        let (mut a, mut b) = (clients(1, 0, 60.0, 3).remove(0), clients(1, 0, 60.0, 3).remove(0));
        let ceilings: Vec<f64> = (0..4).map(|k| w.client.backoff_s(k, 1.0)).collect();
        for ceiling in ceilings {
            let d = a.backoff_s(&w);
            assert!((0.0..ceiling).contains(&d), "{d} not below {ceiling}");
        }
        a.succeeded();
        assert_eq!(a.failures, 0);
        assert_eq!(a.query(&w), b.query(&w), "retries drew from the script's generator");
    }
}
