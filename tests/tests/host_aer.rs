//! Asynchronous events against our target in-process: a namespace added by a configuration reload shows
//! up in `namespaces()` without a reconnect, through the Namespace Attribute Changed event.

mod host_support;

use std::time::Duration;

use host_support::{options, pattern, SUBNQN};
use nvmf_config::TargetConfig;
use nvmf_host::{Controller, ControllerState};
use nvmf_target::reload::Reloader;

#[test]
fn a_namespace_added_by_reload_appears_without_reconnecting() {
    let mut config = TargetConfig::from_str(&host_support::config(), "<test>").expect("test configuration is valid");
    config.listeners[0].address.set_port(0);
    // Start with namespace 1 only; the reload adds namespace 2 back.
    let full = config.clone();
    config.subsystems[0].namespaces.truncate(1);
    let mut running = nvmf_target::daemon::start(&config).expect("target starts");
    let addr = running.local_addrs()[0];
    let mut reloader = Reloader::new(None, config);

    let ctrl = Controller::connect(addr, SUBNQN, options(1)).expect("connect");
    assert_eq!(ctrl.known_namespaces().iter().map(|n| n.nsid).collect::<Vec<_>>(), [1]);
    let seen = ctrl.namespace_generation();

    let summary = reloader.apply(&full, &mut running).expect("reload applies");
    assert_eq!(summary.namespaces_added, 1);
    let now = ctrl.wait_namespace_change(seen, Duration::from_secs(30));
    assert!(now > seen, "no namespace change event within 30 s");

    let known = ctrl.known_namespaces();
    assert_eq!(known.iter().map(|n| n.nsid).collect::<Vec<_>>(), [1, 2]);
    assert_eq!((known[1].block_size, known[1].blocks), (4096, 2048), "8 MiB of 4 KiB blocks");
    assert_eq!(ctrl.reconnects(), 0);
    assert_eq!(ctrl.state(), ControllerState::Live);

    // The new namespace takes I/O, and the event was re-armed: removing it is noticed too.
    let d = pattern(8192, 9);
    ctrl.write(2, 4, &d).unwrap();
    let mut back = vec![0; d.len()];
    ctrl.read(2, 4, &mut back).unwrap();
    assert_eq!(back, d);
    let mut one = full.clone();
    one.subsystems[0].namespaces.truncate(1);
    reloader.apply(&one, &mut running).expect("reload applies");
    assert!(ctrl.wait_namespace_change(now, Duration::from_secs(30)) > now, "no event for the removal");
    assert_eq!(ctrl.known_namespaces().iter().map(|n| n.nsid).collect::<Vec<_>>(), [1]);

    ctrl.disconnect().unwrap();
    running.shutdown();
}

#[test]
fn a_reconnect_rescans_namespaces_and_rearms_the_event() {
    let mut full = TargetConfig::from_str(&host_support::config(), "<test>").expect("test configuration is valid");
    full.listeners[0].address.set_port(0);
    let mut one = full.clone();
    one.subsystems[0].namespaces.truncate(1);
    let running = nvmf_target::daemon::start(&one).expect("target starts");
    let addr = running.local_addrs()[0];
    let mut o = options(1);
    o.reconnect_delay = Duration::from_millis(200);
    let ctrl = Controller::connect(addr, SUBNQN, o).expect("connect");
    let seen = ctrl.namespace_generation();

    // The target comes back on the same port with namespace 2 as well: the reconnect's rescan finds it.
    running.shutdown();
    full.listeners[0].address.set_port(addr.port());
    let mut running = nvmf_target::daemon::start(&full).expect("target restarts");
    let now = ctrl.wait_namespace_change(seen, Duration::from_secs(30));
    assert!(now > seen, "the reconnect did not report the new namespace");
    assert_eq!(ctrl.reconnects(), 1);
    assert_eq!(ctrl.known_namespaces().iter().map(|n| n.nsid).collect::<Vec<_>>(), [1, 2]);

    // The new association has Asynchronous Event Requests outstanding: a reload is noticed.
    let mut reloader = Reloader::new(None, full.clone());
    one.listeners[0].address.set_port(addr.port());
    reloader.apply(&one, &mut running).expect("reload applies");
    assert!(ctrl.wait_namespace_change(now, Duration::from_secs(30)) > now, "no event after the reconnect");
    assert_eq!(ctrl.known_namespaces().iter().map(|n| n.nsid).collect::<Vec<_>>(), [1]);
    assert_eq!(ctrl.reconnects(), 1);

    ctrl.disconnect().unwrap();
    running.shutdown();
}
