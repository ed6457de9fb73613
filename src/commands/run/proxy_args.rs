//! The flags a run starts its proxy child with (`--via-proxy`,
//! `--generators`), checked against the run's own: validation of the
//! command line, apart from how the child is started (via_proxy.rs) so
//! that the plan depends on neither the proxy's nor the generators' launch.

use super::args::RunArgs;
use crate::core::proxy_tier::{self, ProxyFault};
use crate::core::settings::{Admission, ClusterKind, Detection, GeneratorsOn, Named};
use crate::error::{input, Error};

/// The most generator processes a run may start.
pub const MAX_GENERATORS: u32 = 64;

/// Checks `--via-proxy` against the other flags; returns the flags the
/// proxy child is started with (`None` without `--via-proxy`).
pub fn flags(args: &RunArgs, time_scale: f64) -> Result<Option<Vec<String>>, Error> {
    if !args.via_proxy {
        return Ok(None);
    }
    let c = &args.common;
    if c.cluster == ClusterKind::Sim {
        return Err(input("--via-proxy", "needs real servers: --cluster local, docker or external"));
    }
    if c.detection == Detection::Oracle {
        return Err(input(
            "--via-proxy",
            "the proxy learns of faults by its own probes; --detection oracle cannot tell it",
        ));
    }
    if args.admission != Admission::None {
        return Err(input("--via-proxy", "--admission modes needs the replicas' CPU, which the proxy does not sample"));
    }
    let mut f: Vec<String> = Vec::new();
    let mut put = |flag: &str, value: String| f.extend([flag.to_string(), value]);
    put("--strategy", args.strategy.name().into());
    put("--mix", args.mix.clone());
    put("--recovery", args.recovery.name().into());
    put("--T", c.clients.to_string());
    put("--replicas", c.replicas.to_string());
    put("--seed", c.seed.to_string());
    put("--time-scale", time_scale.to_string());
    put("--cpus", c.cpus.to_string());
    put("--detection", c.detection.name().into());
    put("--probe-interval-ms", c.probe_interval_ms.to_string());
    let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    for (flag, value) in [
        ("--reference", c.reference.clone()),
        ("--split", c.split.clone()),
        (
            "--workload",
            c.workload.as_deref().map(|p| match super::workloads::built_in_workload(p) {
                Some(_) => p.display().to_string(),
                None => absolute(p).display().to_string(),
            }),
        ),
        ("--calibration", c.calibration.as_deref().map(|p| absolute(p).display().to_string())),
        ("--load", c.load.map(|x| x.to_string())),
        ("--theta", c.theta.map(|x| x.to_string())),
        ("--freemium-borrow", c.freemium_borrow.map(|x| x.name().to_string())),
    ] {
        if let Some(v) = value {
            put(flag, v);
        }
    }
    if c.mixed_unbounded {
        f.push("--mixed-unbounded".into());
    }
    if let Some(a) = args.metrics_addr {
        f.extend(["--metrics-addr".into(), a.to_string()]);
    }
    Ok(Some(f))
}

/// The most proxies a run's tier may have.
pub const MAX_PROXIES: u32 = 8;

/// Checks `--proxies` and `--proxy-faults` against the other flags; the
/// proxy faults on the unscaled timeline of `timeline_s` seconds. A tier
/// of two or more implies `--via-proxy`.
pub fn check_proxies(args: &mut RunArgs, timeline_s: f64) -> Result<Vec<ProxyFault>, Error> {
    let n = args.proxies;
    if n == 0 || n > MAX_PROXIES {
        return Err(input("--proxies", format!("must be 1 to {MAX_PROXIES}, got {n}")));
    }
    let faults = proxy_tier::parse(&args.proxy_faults, timeline_s, n).map_err(|e| input("--proxy-faults", e))?;
    if n > 1 {
        args.via_proxy = true;
        if args.metrics_addr.is_some() {
            return Err(input(
                "--metrics-addr",
                format!("one address cannot serve {n} proxies; scrape each member's own `plbbench proxy` instead"),
            ));
        }
    }
    Ok(faults)
}

/// Checks `--generators` (and the internal `--generator-child`) against
/// the other flags; whether the run has several (then it goes through a
/// proxy, as with `--via-proxy`).
pub fn check_generators(args: &RunArgs) -> Result<bool, Error> {
    let n = args.generators;
    if n == 0 || n > MAX_GENERATORS {
        return Err(input("--generators", format!("must be 1 to {MAX_GENERATORS}, got {n}")));
    }
    if let Some(i) = args.generator_child.filter(|&i| i >= n) {
        return Err(input("--generator-child", format!("{i} is not below --generators {n}")));
    }
    if n == 1 {
        if args.generators_on == GeneratorsOn::Docker {
            return Err(input("--generators-on", "docker needs --generators 2 or more"));
        }
        return Ok(false);
    }
    if args.common.cluster == ClusterKind::Sim {
        return Err(input(
            "--generators",
            "needs real servers (--cluster local, docker or external): the simulator runs every client in one process",
        ));
    }
    if n > args.common.clients {
        return Err(input(
            "--generators",
            format!("{n} generators need at least {n} clients; --T is {}", args.common.clients),
        ));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::run::args::default_run_args;

    #[test]
    fn several_generators_need_real_servers_and_a_client_each() {
        let mut run = default_run_args();
        assert!(!check_generators(&run).unwrap(), "one generator: the run as before");
        run.generators_on = GeneratorsOn::Docker;
        let e = check_generators(&run).unwrap_err();
        assert_eq!(e.to_string(), "--generators-on: docker needs --generators 2 or more");
        run.generators_on = GeneratorsOn::Host;
        run.generators = 0;
        assert!(check_generators(&run).unwrap_err().to_string().contains("--generators"));
        run.generators = 2;
        run.common.cluster = ClusterKind::Sim;
        let e = check_generators(&run).unwrap_err();
        assert!(e.to_string().starts_with("--generators: needs real servers"), "{e}");
        assert_eq!(e.exit_code(), 2);
        run.common.cluster = ClusterKind::Local;
        assert!(check_generators(&run).unwrap(), "two generators go through a proxy");
        run.common.clients = 1;
        assert!(check_generators(&run).unwrap_err().to_string().contains("at least 2 clients"));
        run.common.clients = 10;
        run.generator_child = Some(2);
        assert!(check_generators(&run).unwrap_err().to_string().starts_with("--generator-child"));
    }

    #[test]
    fn a_tier_of_proxies_implies_via_proxy_and_checks_its_faults() {
        let mut run = default_run_args();
        assert!(check_proxies(&mut run, 300.0).unwrap().is_empty());
        assert!(!run.via_proxy, "one proxy: --via-proxy as given");
        run.proxies = 3;
        run.proxy_faults = "failover".into();
        assert_eq!(check_proxies(&mut run, 300.0).unwrap().len(), 3);
        assert!(run.via_proxy);
        run.proxies = 9;
        assert_eq!(check_proxies(&mut run, 300.0).unwrap_err().to_string(), "--proxies: must be 1 to 8, got 9");
        run.proxies = 1;
        let e = check_proxies(&mut run, 300.0).unwrap_err();
        assert!(e.to_string().starts_with("--proxy-faults: a tier needs --proxies 2"), "{e}");
        assert_eq!(e.exit_code(), 2);
        run.proxies = 2;
        run.proxy_faults = "none".into();
        run.metrics_addr = Some("127.0.0.1:9187".parse().unwrap());
        assert!(check_proxies(&mut run, 300.0).unwrap_err().to_string().starts_with("--metrics-addr"));
    }

    #[test]
    fn via_proxy_refuses_what_the_proxy_cannot_do() {
        let mut run = default_run_args();
        run.via_proxy = true;
        run.common.cluster = ClusterKind::Sim;
        assert!(flags(&run, 1.0).unwrap_err().to_string().contains("--via-proxy"));
        run.common.cluster = ClusterKind::Local;
        run.common.detection = Detection::Oracle;
        assert!(flags(&run, 1.0).is_err());
        run.common.detection = Detection::Probe;
        run.admission = Admission::Modes;
        assert!(flags(&run, 1.0).is_err());
        run.admission = Admission::None;
        assert!(flags(&run, 1.0).unwrap().is_some());
    }
}
