//! Per-queue metrics after real I/O: the host library against our target in-process on 127.0.0.1, the
//! daemon's collector fed from the controller's queues, the text scraped, its values checked against the I/O
//! done and the whole page checked by `promtool check metrics`.

mod host_support;

use std::collections::HashMap;

use host_support::{options, pattern, Target, SUBNQN};
use nvmf_host::metrics::{registry, ControllerSample, HostCollector};
use nvmf_host::Controller;
use nvmf_service::metrics_http::{render, Format};
use nvmf_service::rdma_sysfs::RdmaSysfs;

/// `series value` lines of a Prometheus text page.
fn values(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, v)| (series.to_owned(), v.parse().unwrap_or(f64::NAN)))
        .collect()
}

fn sample(ctrl: &Controller) -> ControllerSample {
    let mut queues = vec![(0, ctrl.admin().unwrap().stats())];
    queues.extend(ctrl.io_queues().iter().map(|q| (q.qid(), q.stats())));
    ControllerSample {
        name: "nvmf0".into(),
        subnqn: SUBNQN.into(),
        traddr: ctrl.addr().to_string(),
        state: "live".into(),
        reconnects: 0,
        exports: 0,
        queues,
        paths: Vec::new(),
        nbd_limits: Vec::new(),
    }
}

#[test]
fn queue_bytes_errors_and_latency_after_io() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(1)).expect("connect");
    // 8 writes of 4 KiB and 4 reads of 8 KiB on the one I/O queue, then a read past the end (an error status).
    let data = pattern(4096, 3);
    for i in 0..8 {
        ctrl.write(1, i * 8, &data).expect("write");
    }
    let mut buf = vec![0; 8192];
    for i in 0..4 {
        ctrl.read(1, i * 16, &mut buf).expect("read");
        assert_eq!(&buf[..4096], &data[..], "read back");
    }
    let past_end = nvmf_common::nvme::io::Read { nsid: 1, slba: 16 << 11, nlb: 0, ..Default::default() }.to_sqe();
    let request = nvmf_host::queue::Request {
        sqe: past_end,
        data: vec![0; 512],
        direction: nvmf_host::queue::DataDirection::ControllerToHost,
        context: (),
    };
    let reply = ctrl.submit_io(request).unwrap().wait(std::time::Duration::from_secs(10)).unwrap();
    assert!(!reply.result.unwrap().status.is_success(), "a read past the end fails");

    let s = sample(&ctrl);
    let text = render(
        &registry(HostCollector::new(move || vec![s.clone()]), RdmaSysfs::new("/nonexistent")),
        Format::Prometheus,
    )
    .unwrap();
    let v = values(&text);
    let get = |series: &str| *v.get(series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    let io = r#"controller="nvmf0",qid="1""#;
    // Written: the queue's Fabrics Connect data (1 KiB) and the writes.
    assert_eq!(get(&format!(r#"nvmf_host_queue_bytes_total{{{io},direction="write"}}"#)), 1024.0 + 8.0 * 4096.0);
    assert_eq!(get(&format!(r#"nvmf_host_queue_bytes_total{{{io},direction="read"}}"#)), 4.0 * 8192.0);
    assert_eq!(get(&format!("nvmf_host_queue_errors_total{{{io}}}")), 1.0);
    // Every I/O command (the Fabrics Connect of the queue too) is in the histogram, with a positive sum.
    let count = get(&format!("nvmf_host_queue_command_latency_seconds_count{{{io}}}"));
    assert_eq!(count, get(&format!("nvmf_host_queue_commands_total{{{io}}}")), "{text}");
    assert_eq!(count, 1.0 + 8.0 + 4.0 + 1.0);
    assert_eq!(get(&format!(r#"nvmf_host_queue_command_latency_seconds_bucket{{{io},le="+Inf"}}"#)), count);
    assert!(get(&format!("nvmf_host_queue_command_latency_seconds_sum{{{io}}}")) > 0.0);
    // Adaptive polling: between the commands, waited for one by one, the I/O thread slept.
    assert!(get(&format!("nvmf_host_queue_sleeps_total{{{io}}}")) > 0.0, "{text}");
    // The admin queue read Identify data and counts none of the I/O.
    assert!(get(r#"nvmf_host_queue_bytes_total{controller="nvmf0",qid="0",direction="read"}"#) >= 4096.0);

    host_support::assert_promtool_accepts(&text);
    ctrl.disconnect().expect("clean disconnect");
}
