//! A router's state handed from one instance to another: what a tier's
//! leader publishes with every role vector, and what a new leader starts
//! from after the old one dies (docs/scale.md, "When the leader dies"). A
//! new leader that started from `Router::new`'s reference split would undo
//! every repair and borrow at once; [`Router::restore`] starts it from the
//! roles it last followed and the open sessions rebuilt from the
//! followers' reports instead.

use super::{Replica, Router, RouterConfig};
use crate::core::model::{ReplicaId, Role};
use serde::{Deserialize, Serialize};

/// One replica as a router holds it: what a follower needs to route within
/// the leader's roles, and a new leader needs to go on from them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Its role now.
    pub role: Role,
    /// The role it returns to when it is lent (`None`: not lent).
    pub home: Option<Role>,
    /// Whether the router holds it healthy.
    pub healthy: bool,
    /// Open sessions `[P, F]`.
    pub active: [u32; 2],
    /// Freemium sessions on it as guests of its Premium role.
    pub guests: u32,
}

impl Router {
    /// Every replica as this router holds it, in id order.
    pub fn held(&self) -> Vec<Held> {
        self.replicas
            .iter()
            .map(|r| Held { role: r.role, home: r.home, healthy: r.healthy, active: r.active, guests: r.guests })
            .collect()
    }

    /// A router that goes on from `held` (one entry per replica, in id
    /// order): the roles, loans, health and open sessions given; shares
    /// full and CPU unread until the next reading; round robin from the
    /// first replica. Refused when `held` does not name K replicas or
    /// counts more guests on a replica than its Freemium sessions.
    pub fn restore(cfg: RouterConfig, held: &[Held]) -> Result<Router, String> {
        if held.len() != cfg.replicas {
            return Err(format!("{} replicas held, the router has {}", held.len(), cfg.replicas));
        }
        if let Some(i) = held.iter().position(|h| h.guests > h.active[1]) {
            return Err(format!("{} holds more guests than Freemium sessions", ReplicaId(i)));
        }
        let mut router = Router::new(cfg);
        for (rep, h) in router.replicas.iter_mut().zip(held) {
            *rep =
                Replica { role: h.role, home: h.home, healthy: h.healthy, active: h.active, guests: h.guests, ..*rep };
        }
        router.sync_all();
        Ok(router)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::Class;
    use crate::core::router::{FreemiumBorrow, Strategy};

    fn cfg() -> RouterConfig {
        RouterConfig { theta: 3, mixed_bounded: true, ..RouterConfig::for_tests(Strategy::Plb, [2, 1, 2]) }
    }

    /// A router after a repair and a loan, restored from what it holds,
    /// makes the same choices from there on as the original.
    #[test]
    fn a_restored_router_goes_on_as_the_original_would() {
        let mut a = Router::new(RouterConfig { freemium_borrow: FreemiumBorrow::Idle, ..cfg() });
        a.set_health(ReplicaId(0), false);
        for i in 0..14 {
            a.admit(if i % 3 == 0 { Class::P } else { Class::F });
        }
        assert!(!a.held()[0].healthy);
        let mut b = Router::restore(a.config().clone(), &a.held()).unwrap();
        assert_eq!(b.held(), a.held());
        for i in 0..20 {
            let class = if i % 2 == 0 { Class::P } else { Class::F };
            assert_eq!(b.admit(class), a.admit(class), "admission {i}");
            if i % 5 == 4 {
                let r = ReplicaId(1 + i % 4);
                if a.active(r)[0] > 0 {
                    a.release(r, Class::P);
                    b.release(r, Class::P);
                }
            }
            assert_eq!(b.held(), a.held(), "after admission {i}");
        }
    }

    #[test]
    fn a_state_that_does_not_fit_is_refused() {
        let held = Router::new(cfg()).held();
        assert!(Router::restore(cfg(), &held[..4]).unwrap_err().contains("4 replicas held, the router has 5"));
        let mut bad = held.clone();
        bad[2].guests = 1;
        assert!(Router::restore(cfg(), &bad).unwrap_err().contains("more guests than Freemium sessions"));
    }
}
