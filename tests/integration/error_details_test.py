#!/usr/bin/python3
"""Field errors on the wire, read by an independent client (Debian's python3-grpcio; stubs of
rdattn.v1 and of googleapis' google/rpc/{status,error_details}.proto generated at build time).

A real coordinator on loopback (auth off, a fresh SQLite file). SubmitSweep with a sweep that has
three defects and no request_id is INVALID_ARGUMENT, and its grpc-status-details-bin trailer is a
google.rpc.Status (AIP-193) with the call's code and message whose details hold exactly one Any of
google.rpc.BadRequest, one FieldViolation per field error:
  - the fields are request_id, arms[0], seeds[1] and scales[0].shape.width, request_id first;
  - arms[0]'s description keeps "; seeds: y" inside it (the arm's name): one violation, not two;
  - the message is "field: description" of every violation joined with "; ", in their order.
validate_only needs no request_id: the same sweep gives the same violations less request_id.
An error that is not made of field errors carries no details (NOT_FOUND: GetSweep of an unknown
sweep). The coordinator stores nothing for the rejected sweep (ListSweeps is empty).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from itest import check  # noqa: E402

DETAILS_KEY = "grpc-status-details-bin"


def start_coordinator(coordinator, tmp):
    log = open(os.path.join(tmp, "coordinator.log"), "w")
    p = subprocess.Popen([coordinator, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "c.db")],
                         stdout=subprocess.PIPE, stderr=log, text=True)
    m = re.search(r"listening on (127\.0\.0\.1):(\d+)", p.stdout.readline())
    check(m is not None, "the coordinator listens on an OS-chosen port")
    return p, log, int(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--pystubs", required=True, help="folder with the generated Python stubs")
    args = ap.parse_args()
    sys.path.insert(0, args.pystubs)
    import grpc  # noqa: E402
    from google.rpc import error_details_pb2, status_pb2  # noqa: E402
    from rdattn.v1 import coordinator_pb2 as cpb, coordinator_pb2_grpc as cgrpc, sweep_pb2 as spb  # noqa: E402

    def bad_spec():
        s = spb.SweepSpec(name="bad", arms=["x; seeds: y", "block"], seeds=[1, 1])
        sc = s.scales.add(name="tiny", preset="tiny")
        sc.shape.width = 63  # not divisible by the preset's heads
        s.data.train_shards.append("/nonexistent/train_*.bin")
        s.data.tokenizer = "byte"
        s.optim.peak_lr = 0.003
        s.schedule.total_tokens = 65536
        s.schedule.global_batch_tokens = 4096
        return s

    def rejected(call):
        try:
            call()
        except grpc.RpcError as e:
            return e
        raise AssertionError("the call was accepted")

    def violations_of(e, what):
        trailers = dict(e.trailing_metadata() or ())
        check(DETAILS_KEY in trailers, "%s: the trailers carry %s" % (what, DETAILS_KEY))
        st = status_pb2.Status.FromString(trailers[DETAILS_KEY])
        check(st.code == e.code().value[0] and st.message == e.details(),
              "%s: google.rpc.Status has the call's code (%d) and message" % (what, st.code))
        check(len(st.details) == 1 and st.details[0].type_url == "type.googleapis.com/google.rpc.BadRequest",
              "%s: its details are one Any of google.rpc.BadRequest (%s)" %
              (what, [d.type_url for d in st.details]))
        br = error_details_pb2.BadRequest()
        check(st.details[0].Unpack(br), "%s: the Any unpacks as BadRequest" % what)
        vs = [(v.field, v.description) for v in br.field_violations]
        check(all(f and d for f, d in vs), "%s: every violation has a field and a description" % what)
        check(e.details() == "; ".join("%s: %s" % v for v in vs),
              "%s: the message is the violations joined, in order, for people" % what)
        return vs

    coordinator = os.path.join(args.bin, "coordinator", "rdattn-coordinator")
    tmp = tempfile.mkdtemp(prefix="rdattn-error-details-")
    proc, log, port = start_coordinator(coordinator, tmp)
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = cgrpc.SweepServiceStub(channel)

        e = rejected(lambda: stub.SubmitSweep(cpb.SubmitSweepRequest(spec=bad_spec()), timeout=30))
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "SubmitSweep: INVALID_ARGUMENT (%s)" % e.code())
        vs = violations_of(e, "SubmitSweep")
        fields = [f for f, _ in vs]
        print("violations:", vs, flush=True)
        check(sorted(fields) == sorted(["request_id", "arms[0]", "seeds[1]", "scales[0].shape.width"]),
              "SubmitSweep: one violation per field error: %s" % fields)
        check(fields[0] == "request_id" and vs[0][1] == "required", "SubmitSweep: request_id: required comes first")
        arm = dict(vs)["arms[0]"]
        check(arm.startswith("unknown arm 'x; seeds: y'; valid: "),
              "arms[0]: the reason keeps '; seeds: y' inside it: %r" % arm)
        check(dict(vs)["seeds[1]"] == "duplicate seed 1", "seeds[1]: duplicate seed 1")
        check("divisible" in dict(vs)["scales[0].shape.width"], "scales[0].shape.width: the shape error")

        e = rejected(lambda: stub.SubmitSweep(cpb.SubmitSweepRequest(spec=bad_spec(), validate_only=True),
                                              timeout=30))
        vs_validate = violations_of(e, "SubmitSweep validate_only")
        check(vs_validate == vs[1:], "validate_only: the same violations, less request_id")

        e = rejected(lambda: stub.GetSweep(cpb.GetSweepRequest(sweep_id="sw-nosuch"), timeout=30))
        check(e.code() == grpc.StatusCode.NOT_FOUND and DETAILS_KEY not in dict(e.trailing_metadata() or ()),
              "GetSweep of an unknown sweep: NOT_FOUND without details (%s: %s)" % (e.code(), e.details()))

        listed = stub.ListSweeps(cpb.ListSweepsRequest(), timeout=30)
        check(len(listed.sweeps) == 0, "nothing was stored")
        channel.close()
    finally:
        proc.terminate()
        rc = proc.wait(timeout=30)
        log.close()
    check(rc == 0, "the coordinator stops cleanly on SIGTERM (exit %d)" % rc)
    print("error_details: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
