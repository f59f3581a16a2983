"""Smoke check for an AWS API emulator: SQS + EventBridge as the outbox uses them.

    AWS_ENDPOINT_URL=http://127.0.0.1:4566 python localstack/emulator_smoke.py

Needs boto3 (any recent version). Creates uniquely named resources, so it can
run against an emulator that tests are using. Exits 0 when every check passes.
Checks: EventBridge rule on a custom bus -> SQS target, with the event
envelope (detail-type, source, detail); a detail-type prefix pattern; FIFO
SendMessageBatch with MessageGroupId/MessageDeduplicationId (dedupe, order in
a group); SendMessageBatch to a missing queue fails with QueueDoesNotExist.
"""

import json
import os
import sys
import time
import uuid

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint = os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
kw = dict(
    endpoint_url=endpoint,
    region_name=os.environ.get("AWS_REGION", "us-east-1"),
    aws_access_key_id="test",
    aws_secret_access_key="test",
    config=Config(retries={"max_attempts": 1}, connect_timeout=5, read_timeout=30),
)
sqs = boto3.client("sqs", **kw)
events = boto3.client("events", **kw)
suffix = uuid.uuid4().hex[:8]
failures = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""))
    if not ok:
        failures.append(name)


def queue(name, **attributes):
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def drain(url, want, seconds=10):
    got, deadline = [], time.time() + seconds
    while time.time() < deadline and len(got) < want:
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                     AttributeNames=["All"]).get("Messages", []):
            got.append(m)
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return got


# EventBridge -> SQS
bus = f"smoke-bus-{suffix}"
events.create_event_bus(Name=bus)
all_url, all_arn = queue(f"smoke-all-{suffix}")
order_url, order_arn = queue(f"smoke-order-{suffix}")
for rule, pattern, arn in (
    (f"smoke-all-{suffix}", {"source": ["outbox"]}, all_arn),
    (f"smoke-order-{suffix}", {"source": ["outbox"], "detail-type": [{"prefix": "order."}]}, order_arn),
):
    events.put_rule(Name=rule, EventBusName=bus, EventPattern=json.dumps(pattern))
    r = events.put_targets(Rule=rule, EventBusName=bus, Targets=[{"Id": "q", "Arn": arn}])
    check(f"put_targets {rule}", r.get("FailedEntryCount", 0) == 0, r.get("FailedEntries"))

r = events.put_events(Entries=[
    {"EventBusName": bus, "Source": "outbox", "DetailType": "order.created", "Detail": json.dumps({"id": "e1"})},
    {"EventBusName": bus, "Source": "outbox", "DetailType": "invoice.paid", "Detail": json.dumps({"id": "e2"})},
    {"EventBusName": bus, "Source": "other", "DetailType": "order.created", "Detail": json.dumps({"id": "e3"})},
])
check("put_events accepted", r.get("FailedEntryCount", 0) == 0, r.get("Entries"))
bodies = [json.loads(m["Body"]) for m in drain(all_url, 2)]
check("source pattern delivers e1, e2", sorted(b.get("detail", {}).get("id") for b in bodies) == ["e1", "e2"], bodies)
check("envelope has id, source, detail-type, detail",
      bool(bodies) and all({"id", "source", "detail-type", "detail"} <= set(b) for b in bodies), bodies)
time.sleep(1)
ids = sorted(json.loads(m["Body"])["detail"]["id"] for m in drain(order_url, 2, seconds=3))
check("prefix pattern delivers only e1", ids == ["e1"], ids)

# FIFO batch
fifo_url, _ = queue(f"smoke-{suffix}.fifo", FifoQueue="true", ContentBasedDeduplication="false")
entries = [
    {"Id": "a", "MessageBody": "a1", "MessageGroupId": "order-1", "MessageDeduplicationId": "ev-a"},
    {"Id": "b", "MessageBody": "b1", "MessageGroupId": "order-1", "MessageDeduplicationId": "ev-b"},
    {"Id": "c", "MessageBody": "c1", "MessageGroupId": "order-2", "MessageDeduplicationId": "ev-c"},
]
r = sqs.send_message_batch(QueueUrl=fifo_url, Entries=entries)
check("FIFO batch: 3 successful", len(r.get("Successful", [])) == 3 and not r.get("Failed"), r.get("Failed"))
sqs.send_message_batch(QueueUrl=fifo_url, Entries=entries[:1])  # duplicate dedupe id
got = [(m["Attributes"].get("MessageGroupId"), m["Body"]) for m in drain(fifo_url, 4, seconds=4)]
check("FIFO dedupe: 3 unique messages", sorted(b for _, b in got) == ["a1", "b1", "c1"], got)
check("FIFO order within group", [b for g, b in got if g == "order-1"] == ["a1", "b1"], got)

# Missing queue
missing = all_url.rsplit("/", 1)[0] + f"/missing-{suffix}"
try:
    sqs.send_message_batch(QueueUrl=missing, Entries=[{"Id": "1", "MessageBody": "x"}])
    check("missing queue raises", False, "no error")
except ClientError as e:
    err = e.response["Error"]
    print(f"     missing queue -> Code={err.get('Code')} QueryErrorCode={err.get('QueryErrorCode')} "
          f"HTTP {e.response['ResponseMetadata'].get('HTTPStatusCode')}: {err.get('Message')}")
    check("missing queue raises QueueDoesNotExist",
          "QueueDoesNotExist" in (err.get("QueryErrorCode", ""), err.get("Code", ""))
          or err.get("Code") == "AWS.SimpleQueueService.NonExistentQueue", err)

print("emulator smoke:", "all checks passed" if not failures else f"{len(failures)} failed: {failures}")
sys.exit(1 if failures else 0)
