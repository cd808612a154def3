//! Asynchronous Event Requests: completion on a namespace change, the AER limit, events disabled by
//! configuration.

use super::*;

#[test]
fn aer_completes_on_namespace_change() {
    let mut a = associate(target());
    let wakes = Arc::new(AtomicUsize::new(0));
    // The notifier is registered before Connect in real use; this admin queue was connected without one, so
    // register through a fresh association.
    let mut engine = engine();
    let mut admin = Host::new(&a.target);
    let w = Arc::clone(&wakes);
    admin.queue.set_event_notifier(Arc::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    }));
    admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    admin.enable(&mut engine);
    drop(a.admin);

    assert!(admin.submit(&mut engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none(), "AER is held");
    let subsystem = a.target.subsystem(SUBNQN).unwrap();
    subsystem.add_namespace(NamespaceParams::new(2, memory(1 << 16, 512))).unwrap();
    assert_eq!(wakes.load(Ordering::Relaxed), 1);
    let mut out = Vec::new();
    admin.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    let [Step::Respond { slot, cqe, data: None }] = out[..] else { panic!("AER not completed: {out:?}") };
    admin.queue.release(&mut engine, slot);
    assert_eq!(AsyncEvent::from_dw0(cqe.dw0).unwrap(), AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED);
    assert_eq!(cqe.dw0, 0x0004_0002);

    // The I/O queue sees the new namespace.
    a.io.write(&mut a.engine, 2, 0, &pattern(512, 9)).ok();

    // Masked until the log is read: another change raises nothing, even with an AER held.
    assert!(admin.submit(&mut engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    subsystem.remove_namespace(2).unwrap();
    assert_eq!(wakes.load(Ordering::Relaxed), 1);
    let mut glp = GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, 0xFFFF_FFFF, 4096).unwrap();
    glp.rae = true;
    let page = admin.log_page(&mut engine, glp).ok().data;
    let ChangedNamespaces::List(list) = ChangedNamespaceList::parse(&page).unwrap() else { panic!() };
    assert_eq!(list.iter().collect::<Vec<_>>(), vec![2]);
    // RAE kept the list and the mask; a read without RAE clears both.
    glp.rae = false;
    assert_eq!(admin.log_page(&mut engine, glp).ok().data, page);
    let page = admin.log_page(&mut engine, glp).ok().data;
    assert!(page.iter().all(|&b| b == 0));

    // Now a change completes the held AER.
    subsystem.add_namespace(NamespaceParams::new(5, memory(1 << 16, 512))).unwrap();
    assert_eq!(wakes.load(Ordering::Relaxed), 2);
    out.clear();
    admin.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert_eq!(out.len(), 1);
    let Step::Respond { slot, .. } = out[0] else { panic!() };
    admin.queue.release(&mut engine, slot);

    // A change with no AER outstanding is delivered by the next AER at once (after the log read unmasks).
    admin.log_page(&mut engine, GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, 0, 4096).unwrap()).ok();
    subsystem.remove_namespace(5).unwrap();
    let done = admin.submit(&mut engine, AsyncEventRequest.to_sqe(), &[], &[]).unwrap().ok();
    assert_eq!(done.cqe.dw0, AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED.to_dw0());
}

#[test]
fn aer_limit() {
    let mut a = associate(target());
    for _ in 0..4 {
        assert!(a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    }
    let done = a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).unwrap();
    assert_eq!(done.status(), Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED.with_dnr());
}

#[test]
fn aer_disabled_by_configuration() {
    let mut a = associate(target());
    a.admin.run(&mut a.engine, SetFeatures::new(&AsyncEventConfiguration::default()).to_sqe()).ok();
    assert!(a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    a.target.subsystem(SUBNQN).unwrap().add_namespace(NamespaceParams::new(2, memory(1 << 16, 512))).unwrap();
    let mut out = Vec::new();
    a.admin.queue.poll(&mut a.engine, Instant::now(), &mut out).unwrap();
    assert!(out.is_empty());
    // The changed list is kept regardless.
    let page =
        a.admin.log_page(&mut a.engine, GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, 0, 4096).unwrap()).ok().data;
    assert_eq!(page[..4], 2u32.to_le_bytes());
}
