//! The probe's commands (see the binary's docs): each opens its queues with the raw host queue of `main.rs`,
//! does the one thing a well-behaved host would not, and returns what it observed as JSON.

use super::*;

/// A completed command or a broken queue, as JSON fields.
fn outcome_json(q: &mut HostQueue, r: Result<CompletionQueueEntry, Broken>) -> Result<Value, ProbeError> {
    Ok(match r {
        Ok(cqe) => json!({ "outcome": "completed", "status": status_json(cqe.status), "dw0": cqe.dw0 }),
        Err(b) => {
            let disconnected = q.wait_disconnected()?;
            let mut v = json!({ "outcome": "broken", "disconnected": disconnected });
            merge(&mut v, b.to_json());
            v
        }
    })
}

fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(a), Value::Object(b)) = (into, from) {
        a.extend(b);
    }
}

/// Open the admin queue and Fabrics Connect it; a failure at either step is a probe error.
fn connected_admin(o: &Options, send_capacity: usize) -> Result<(HostQueue, u16), ProbeError> {
    let (mut q, _) = open_queue(o.addr, 0, send_capacity)?;
    match q.fabrics_connect(&o.subnqn, &o.hostnqn, 0, CNTLID_DYNAMIC, false)? {
        Ok(cqe) if cqe.status.is_success() => Ok((q, u16::try_from(cqe.dw0 & 0xffff).unwrap_or(0))),
        Ok(cqe) => Err(ProbeError(format!("admin Connect failed: {}", cqe.status))),
        Err(b) => Err(ProbeError(format!("admin Connect: queue broke: {b:?}"))),
    }
}

/// The connect request private data of `reject --case CASE`: a well-formed admin queue request with one field
/// broken.
fn malformed_request(case: &str) -> Result<Vec<u8>, ProbeError> {
    let good = RdmaCmRequest { qid: 0, hrqsize: QUEUE_ENTRIES, hsqsize: QUEUE_ENTRIES - 1, cntlid: 0 };
    Ok(match case {
        "recfmt" => {
            let mut data = good.to_bytes().to_vec();
            data[0] = 1;
            data
        }
        // Far beyond any queue count a controller offers.
        "qid" => RdmaCmRequest { qid: 0xffff, ..good }.to_bytes().to_vec(),
        // 65536 entries on the admin queue (at most 4096 exist; Linux targets allow 32).
        "hsqsize" => RdmaCmRequest { hsqsize: 0xffff, ..good }.to_bytes().to_vec(),
        // A host that can receive no response.
        "hrqsize" => RdmaCmRequest { hrqsize: 0, ..good }.to_bytes().to_vec(),
        // No private data at all. RoCE and InfiniBand CM pad it to 56 bytes of zeros, so the target may see a
        // zeroed request (recfmt 0, hsqsize 0, hrqsize 0) rather than a short one.
        "short" => Vec::new(),
        _ => return Err(ProbeError(format!("reject --case {case}: recfmt, qid, hsqsize, hrqsize or short"))),
    })
}

pub(super) fn reject(o: &Options, case: &str) -> Result<Value, ProbeError> {
    let data = malformed_request(case)?;
    let mut v = json!({ "probe": "reject", "case": case, "sent_bytes": data.len() });
    match open(o.addr, &data, SEND_CAPACITY)? {
        Opened::Established { queue, crqsize } => {
            merge(&mut v, json!({ "outcome": "accepted", "crqsize": crqsize }));
            queue.close()?;
        }
        Opened::Rejected { cm_status, private_data } => {
            merge(
                &mut v,
                json!({ "outcome": "rejected", "cm_status": cm_status, "private_data_len": private_data.len() }),
            );
            if private_data.len() >= 4 {
                let recfmt = u16::from_le_bytes([private_data[0], private_data[1]]);
                let sts = u16::from_le_bytes([private_data[2], private_data[3]]);
                let name =
                    RdmaCmRejectStatus::from_u16(sts).map_or_else(|_| "unknown".to_string(), |s| format!("{s:?}"));
                merge(&mut v, json!({ "reject_recfmt": recfmt, "reject_sts": sts, "reject_name": name }));
            }
        }
        Opened::Failed { event, cm_status } => {
            merge(&mut v, json!({ "outcome": "cm_error", "cm_event": format!("{event:?}"), "cm_status": cm_status }));
        }
    }
    Ok(v)
}

pub(super) fn admin_connect(o: &Options) -> Result<Value, ProbeError> {
    let (mut q, crqsize) = open_queue(o.addr, 0, SEND_CAPACITY)?;
    let mut v = json!({ "probe": "admin-connect", "crqsize": crqsize });
    let connect = q.fabrics_connect(&o.subnqn, &o.hostnqn, 0, CNTLID_DYNAMIC, false)?;
    match connect {
        Ok(cqe) if cqe.status.is_success() => {
            merge(
                &mut v,
                json!({ "outcome": "completed", "status": status_json(cqe.status), "cntlid": cqe.dw0 & 0xffff }),
            );
            match q.property_get_cap()? {
                Ok(cap) => merge(
                    &mut v,
                    json!({
                        "cap_status": status_json(cap.status),
                        "cap_mqes": Capabilities::from_u64(cap.result64()).mqes,
                    }),
                ),
                Err(b) => merge(&mut v, json!({ "cap_broken": b.to_json() })),
            }
        }
        other => merge(&mut v, outcome_json(&mut q, other)?),
    }
    q.close()?;
    Ok(v)
}

pub(super) fn io_before_connect(o: &Options, qid: u16) -> Result<Value, ProbeError> {
    let (mut q, _) = open_queue(o.addr, qid, SEND_CAPACITY)?;
    let mut sqe = Read { nsid: 1, slba: 0, nlb: 0, ..Read::default() }.to_sqe();
    sqe.set_sgl1(&q.keyed(512)?)?;
    let r = q.exec(sqe, 0)?;
    let mut v = json!({ "probe": "io-before-connect", "qid": qid });
    merge(&mut v, outcome_json(&mut q, r)?);
    q.close()?;
    Ok(v)
}

/// Byte the data region is filled with before a transfer the target must not make in full.
const CANARY: u8 = 0xa5;

pub(super) fn bad_keyed_sgl(o: &Options, case: &str) -> Result<Value, ProbeError> {
    let mut v = json!({ "probe": "bad-keyed-sgl", "case": case });
    let (mut q, r) = match case {
        // The target must RDMA READ the Connect data from a key we never registered.
        "rkey-read" => {
            let (mut q, _) = open_queue(o.addr, 0, SEND_CAPACITY)?;
            let r = q.fabrics_connect(&o.subnqn, &o.hostnqn, 0, CNTLID_DYNAMIC, true)?;
            (q, r)
        }
        // The target must RDMA WRITE the Identify data under a wrong key, or 4096 bytes into a 512-byte SGL.
        "rkey" | "length" => {
            let (mut q, _) = connected_admin(o, SEND_CAPACITY)?;
            q.enable()?;
            q.data.write_at(0, &[CANARY; IDENTIFY_LEN as usize])?;
            let mut sqe = Identify::new(cns::CONTROLLER, 0).to_sqe();
            let sgl = if case == "rkey" { corrupt_key(q.keyed(IDENTIFY_LEN)?) } else { q.keyed(512)? };
            sqe.set_sgl1(&sgl)?;
            let r = q.exec(sqe, 0)?;
            if case == "length" {
                // The region behind the descriptor is registered too: a target that ignored the SGL's length
                // would have overwritten it.
                let mut beyond = vec![0u8; IDENTIFY_LEN as usize - 512];
                q.data.read_at(512, &mut beyond)?;
                merge(&mut v, json!({ "wrote_beyond_sgl": beyond.iter().any(|&b| b != CANARY) }));
            }
            (q, r)
        }
        // On an I/O queue: a Write of 4 KiB or more whose keyed SGL describes 512 bytes (the target must not
        // RDMA READ past it, nor take 512 bytes for the whole).
        "write-length" => {
            let (mut admin, cntlid) = connected_admin(o, SEND_CAPACITY)?;
            admin.enable()?;
            let (mut q, _) = open_queue(o.addr, 1, SEND_CAPACITY)?;
            match q.fabrics_connect(&o.subnqn, &o.hostnqn, 1, cntlid, false)? {
                Ok(cqe) if cqe.status.is_success() => {}
                other => return Err(ProbeError(format!("I/O queue Connect: {other:?}"))),
            }
            let mut sqe = Write { nsid: 1, slba: 0, nlb: 7, ..Write::default() }.to_sqe();
            sqe.set_sgl1(&q.keyed(512)?)?;
            let r = q.exec(sqe, 0)?;
            admin.close()?;
            (q, r)
        }
        _ => return Err(ProbeError(format!("bad-keyed-sgl --case {case}: rkey, rkey-read, length or write-length"))),
    };
    merge(&mut v, outcome_json(&mut q, r)?);
    q.close()?;
    Ok(v)
}

/// A capsule of `size` bytes, by default the target's advertised capsule size (IOCCSZ, from Identify Controller)
/// plus a page: more than any receive buffer it posts for it.
pub(super) fn oversize_capsule(o: &Options, size: Option<usize>) -> Result<Value, ProbeError> {
    let (mut q, _) = connected_admin(o, OVERSIZE_CAPACITY)?;
    q.enable()?;
    let mut sqe = Identify::new(cns::CONTROLLER, 0).to_sqe();
    sqe.set_sgl1(&q.keyed(IDENTIFY_LEN)?)?;
    let ioccsz = match q.exec(sqe, 0)? {
        Ok(cqe) if cqe.status.is_success() => {
            let mut id = vec![0u8; IDENTIFY_LEN as usize];
            q.data.read_at(0, &mut id)?;
            IdentifyController::parse(&id)?.ioccsz
        }
        other => return Err(ProbeError(format!("Identify Controller: {other:?}"))),
    };
    let size = size.unwrap_or(usize::try_from(ioccsz).unwrap_or(0) * 16 + 4096);
    if !(SQE_SIZE..=OVERSIZE_CAPACITY).contains(&size) {
        return Err(ProbeError(format!("capsule of {size} bytes: {SQE_SIZE}..={OVERSIZE_CAPACITY}")));
    }
    // A Property Get whose capsule carries junk beyond the receive buffer.
    let get = PropertyGet { size: PropertySize::Eight, offset: Property::Cap.offset() };
    let r = q.exec(get.to_sqe(), size - SQE_SIZE)?;
    let mut v = json!({ "probe": "oversize-capsule", "ioccsz": ioccsz, "sent_bytes": size });
    merge(&mut v, outcome_json(&mut q, r)?);
    q.close()?;
    Ok(v)
}

pub(super) fn cycles(o: &Options, n: u32) -> Result<Value, ProbeError> {
    let start = Instant::now();
    let (mut ok, mut failures, mut first_failure) = (0u32, 0u32, None::<String>);
    for i in 0..n {
        let attempt = (|| -> Result<(), ProbeError> {
            let (mut q, _) = connected_admin(o, SEND_CAPACITY)?;
            match q.property_get_cap()? {
                Ok(cqe) if cqe.status.is_success() => {}
                Ok(cqe) => return Err(ProbeError(format!("Property Get CAP: {}", cqe.status))),
                Err(b) => return Err(ProbeError(format!("Property Get CAP: queue broke: {b:?}"))),
            }
            q.close()
        })();
        match attempt {
            Ok(()) => ok += 1,
            Err(e) => {
                failures += 1;
                first_failure.get_or_insert_with(|| format!("cycle {i}: {}", e.0));
            }
        }
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(n.max(1));
    Ok(json!({
        "probe": "cycles", "outcome": "done", "count": n, "ok": ok, "failures": failures,
        "first_failure": first_failure, "ms_per_cycle": (ms * 10.0).round() / 10.0,
    }))
}

pub(super) fn hold(o: &Options, seconds: u64) -> Result<Value, ProbeError> {
    let (mut q, cntlid) = connected_admin(o, SEND_CAPACITY)?;
    q.enable()?;
    // An Asynchronous Event Request stays outstanding at the target until an event or the queue's end.
    q.post(SubmissionQueueEntry::new(admin::ASYNC_EVENT_REQUEST), 0)?;
    println!("{}", json!({ "probe": "hold", "outcome": "holding", "cntlid": cntlid, "pid": std::process::id() }));
    std::thread::sleep(Duration::from_secs(seconds));
    q.close()?;
    Ok(json!({ "probe": "hold", "outcome": "released" }))
}

pub(super) fn stall(o: &Options, seconds: u64) -> Result<Value, ProbeError> {
    let (mut q, _) = connected_admin(o, SEND_CAPACITY)?;
    let cap = PropertyGet { size: PropertySize::Eight, offset: Property::Cap.offset() };
    let mut wcs = [WorkCompletion::default(); 16];
    // Responses seen while sending (informational: some may land after the last SEND completed).
    let mut responses = 0;
    // One command per receive the probe posted, and one more whose response finds none.
    for _ in 0..=QUEUE_ENTRIES {
        q.post(cap.to_sqe(), 0)?;
        let deadline = Instant::now() + TIMEOUT;
        let mut sent = false;
        while !sent {
            let n = q.cq.poll(&mut wcs)?;
            for wc in &wcs[..n] {
                if !wc.is_success() {
                    return Err(ProbeError(format!("stall: a work completion failed: {}", wc.status.name())));
                }
                if wc.wr_id == WR_SEND {
                    sent = true;
                } else {
                    responses += 1;
                }
            }
            if Instant::now() > deadline {
                return Err(ProbeError("stall: a SEND did not complete".into()));
            }
            if n == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    let start = Instant::now();
    let event = next_event(&q.channel, Duration::from_secs(seconds))?;
    let after = (start.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    Ok(match event {
        Some(ev) if ev.kind == CmEventKind::Disconnected => {
            json!({ "probe": "stall", "outcome": "disconnected", "seconds": after, "responses": responses })
        }
        Some(ev) => json!({ "probe": "stall", "outcome": "event", "cm_event": format!("{:?}", ev.kind) }),
        None => json!({ "probe": "stall", "outcome": "still_connected", "seconds": after, "responses": responses }),
    })
}

pub(super) fn silent(o: &Options, qid: u16, seconds: u64) -> Result<Value, ProbeError> {
    let start = Instant::now();
    let (q, _) = open_queue(o.addr, qid, SEND_CAPACITY)?;
    let event = next_event(&q.channel, Duration::from_secs(seconds))?;
    let after = (start.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    Ok(match event {
        Some(ev) if ev.kind == CmEventKind::Disconnected => {
            json!({ "probe": "silent", "qid": qid, "outcome": "disconnected", "seconds": after })
        }
        Some(ev) => json!({ "probe": "silent", "qid": qid, "outcome": "event", "cm_event": format!("{:?}", ev.kind) }),
        None => json!({ "probe": "silent", "qid": qid, "outcome": "still_connected", "seconds": after }),
    })
}

/// `silent --count N`: N silent queue pairs from this one process (many processes would load a small guest more
/// than the queue pairs load the target), opened one after another, then watched together; each one's time runs
/// from its own connect.
pub(super) fn silent_many(o: &Options, qid: u16, seconds: u64, count: u64) -> Result<Value, ProbeError> {
    let mut open = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..count {
        let start = Instant::now();
        match open_queue(o.addr, qid, SEND_CAPACITY) {
            Ok((q, _)) => open.push((q, start)),
            Err(e) => refused.push(e.0),
        }
    }
    let (mut disconnected, mut other) = (Vec::new(), Vec::new());
    while !open.is_empty() {
        let mut i = 0;
        while i < open.len() {
            let (q, start) = &open[i];
            let after = start.elapsed();
            let event = q.channel.get_event().map_err(|e| ProbeError(e.to_string()))?;
            match event {
                Some(ev) if ev.kind == CmEventKind::TimewaitExit => i += 1,
                Some(ev) if ev.kind == CmEventKind::Disconnected => {
                    disconnected.push((after.as_secs_f64() * 10.0).round() / 10.0);
                    open.swap_remove(i);
                }
                Some(ev) => {
                    other.push(format!("{:?}", ev.kind));
                    open.swap_remove(i);
                }
                None if after >= Duration::from_secs(seconds) => {
                    other.push("still_connected".to_owned());
                    open.swap_remove(i);
                }
                None => i += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let fastest = disconnected.iter().copied().fold(f64::INFINITY, f64::min);
    let slowest = disconnected.iter().copied().fold(0.0, f64::max);
    Ok(json!({
        "probe": "silent", "qid": qid, "count": count, "disconnected": disconnected.len(), "refused": refused.len(),
        "other": other, "first_refusal": refused.first(), "fastest": fastest.is_finite().then_some(fastest),
        "slowest": slowest,
    }))
}

impl HostQueue {
    /// Authentication Send of `message` (DH-HMAC-CHAP), its data fetched by the target's RDMA READ.
    fn auth_send(&mut self, message: &[u8]) -> Result<Result<CompletionQueueEntry, Broken>, ProbeError> {
        self.data.write_at(0, message)?;
        let len = u32::try_from(message.len()).map_err(|_| ProbeError("message too long".into()))?;
        let mut sqe = AuthenticationCommand::send(len).to_sqe();
        sqe.set_sgl1(&self.keyed(len)?)?;
        self.exec(sqe, 0)
    }

    /// Authentication Receive of 4 KiB: the message, or how the command or queue failed.
    fn auth_receive(&mut self) -> Result<Result<Vec<u8>, String>, ProbeError> {
        let mut sqe = AuthenticationCommand::receive(4096).to_sqe();
        sqe.set_sgl1(&self.keyed(4096)?)?;
        Ok(match self.exec(sqe, 0)? {
            Ok(cqe) if cqe.status.is_success() => {
                let mut message = vec![0u8; 4096];
                self.data.read_at(0, &mut message)?;
                Ok(message)
            }
            Ok(cqe) => Err(cqe.status.to_string()),
            Err(b) => Err(format!("{b:?}")),
        })
    }

    /// One DH-HMAC-CHAP transaction with `key`, as the Linux host runs it: whether it succeeded, or how it failed.
    fn authenticate(&mut self, o: &Options, key: &DhchapSecret) -> Result<Result<(), String>, ProbeError> {
        let creds = HostCredentials { secret: key, controller_secret: None, hostnqn: &o.hostnqn, subnqn: &o.subnqn };
        let mut t = HostTransaction::new(creds, 1);
        if let Err(b) = self.auth_send(&t.negotiate())? {
            return Ok(Err(format!("Negotiate: {b:?}")));
        }
        let challenge = match self.auth_receive()? {
            Ok(m) => m,
            Err(e) => return Ok(Err(format!("Challenge: {e}"))),
        };
        let reply = match t.reply(&challenge, &SequenceNumbers::new(), &mut OsRandom) {
            Ok(r) => r,
            Err(e) => return Ok(Err(format!("Reply: {e}"))),
        };
        if let Err(b) = self.auth_send(&reply)? {
            return Ok(Err(format!("Reply sent: {b:?}")));
        }
        Ok(match self.auth_receive()? {
            Ok(success1) => t.success(&success1).map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(format!("Success1: {e}")),
        })
    }
}

/// `impostor --key KEY`: the real host (`--hostnqn`, DH-HMAC-CHAP key KEY) authenticates and enables its admin
/// queue; an impostor opens I/O queue 1 of that controller with the same host NQN, host ID and CNTLID and never
/// authenticates; the real host's I/O queue 1 connects and authenticates meanwhile; the impostor fails its
/// transaction (a Receive before any Negotiate) and its queue ends; the real host's queues serve on.
pub(super) fn impostor(o: &Options, key: &str) -> Result<Value, ProbeError> {
    let key: DhchapSecret = key.parse().map_err(|e| ProbeError(format!("--key: {e}")))?;
    let (mut admin, cntlid) = connected_admin(o, SEND_CAPACITY)?;
    let admin_auth = admin.authenticate(o, &key)?;
    admin.enable()?;
    let connect = |q: &mut HostQueue| -> Result<String, ProbeError> {
        Ok(match q.fabrics_connect(&o.subnqn, &o.hostnqn, 1, cntlid, false)? {
            Ok(cqe) => cqe.status.to_string(),
            Err(b) => format!("{b:?}"),
        })
    };
    let (mut impostor, _) = open_queue(o.addr, 1, SEND_CAPACITY)?;
    let impostor_connect = connect(&mut impostor)?;
    let (mut real, _) = open_queue(o.addr, 1, SEND_CAPACITY)?;
    let real_connect = connect(&mut real)?;
    let real_auth = real.authenticate(o, &key)?;
    let failure1 = impostor.auth_receive()?.map(|m| m.get(1).copied() == Some(auth_id::FAILURE1));
    let impostor_disconnected = impostor.wait_disconnected()?;
    let mut sqe = Read { nsid: 1, slba: 0, nlb: 0, ..Read::default() }.to_sqe();
    sqe.set_sgl1(&real.keyed(512)?)?;
    let real_read = real.exec(sqe, 0)?.map(|c| c.status.to_string()).unwrap_or_else(|b| format!("{b:?}"));
    let keep_alive =
        admin.exec(KeepAlive.to_sqe(), 0)?.map(|c| c.status.to_string()).unwrap_or_else(|b| format!("{b:?}"));
    real.close()?;
    admin.close()?;
    Ok(json!({
        "outcome": "done",
        "admin_authenticated": admin_auth.is_ok(),
        "impostor_connect": impostor_connect,
        "real_connect": real_connect,
        "real_authenticated": real_auth.map_err(|e| e.to_string()).err().unwrap_or_default(),
        "impostor_failure1": failure1.unwrap_or(false),
        "impostor_disconnected": impostor_disconnected,
        "real_read": real_read,
        "keep_alive": keep_alive,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::WireError;

    #[test]
    fn each_reject_case_breaks_exactly_its_field() {
        let parse = |case| RdmaCmRequest::parse(&malformed_request(case).unwrap());
        assert!(matches!(parse("recfmt"), Err(WireError::InvalidField { field: "recfmt", value: 1, .. })));
        let good = RdmaCmRequest { qid: 0, hrqsize: 32, hsqsize: 31, cntlid: 0 };
        assert_eq!(parse("qid"), Ok(RdmaCmRequest { qid: 0xffff, ..good }));
        assert_eq!(parse("hsqsize"), Ok(RdmaCmRequest { hsqsize: 0xffff, ..good }));
        assert_eq!(parse("hrqsize"), Ok(RdmaCmRequest { hrqsize: 0, ..good }));
        assert!(malformed_request("short").unwrap().is_empty());
        assert!(malformed_request("cntlid").is_err());
    }

    #[test]
    fn a_corrupted_key_differs_and_keeps_the_rest() {
        let sgl =
            SglDescriptor::KeyedDataBlock { address: 0x1000, length: 512, key: 0x1234, subtype: SglSubtype::Address };
        let SglDescriptor::KeyedDataBlock { address, length, key, subtype } = corrupt_key(sgl) else {
            panic!("not keyed any more")
        };
        assert_eq!((address, length, subtype), (0x1000, 512, SglSubtype::Address));
        assert_ne!(key, 0x1234);
        let inline = SglDescriptor::DataBlock { address: 0, length: 64, subtype: SglSubtype::Offset };
        assert_eq!(corrupt_key(inline), inline);
    }

    #[test]
    fn broken_queues_and_statuses_render_as_json() {
        assert_eq!(
            Broken::Wc { op: "send", status: "IBV_WC_REM_OP_ERR".into() }.to_json(),
            json!({ "wc_op": "send", "wc_status": "IBV_WC_REM_OP_ERR" })
        );
        assert_eq!(Broken::Cm(CmEventKind::Disconnected).to_json(), json!({ "cm_event": "Disconnected" }));
        let s = status_json(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
        assert_eq!(s, json!({ "sct": 0, "sc": 15, "dnr": true, "name": "DATA_SGL_LENGTH_INVALID" }));
        let mut v = json!({ "a": 1 });
        merge(&mut v, json!({ "b": 2 }));
        assert_eq!(v, json!({ "a": 1, "b": 2 }));
    }
}
