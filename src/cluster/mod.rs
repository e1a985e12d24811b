//! A deployment: many serving instances behind a router (data parallel), or prefill and
//! decode pools joined by a KV link. This module owns what sits above one instance: the
//! router policies ([`router`]) and the driver that runs N instances on one shared clock.
//! One instance's event loop stays in [`crate::sim`].

pub mod router;
