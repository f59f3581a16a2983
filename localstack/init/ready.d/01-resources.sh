#!/bin/sh
# LocalStack init hook (ready stage): create the queues, event bus and rule
# that serverless.yml deploys, under short local names.
#
#   outbox-events        (+ outbox-events-dlq)        standard relay target
#   outbox-events.fifo   (+ outbox-events-dlq.fifo)   per-aggregate ordering
#   outbox-bus                                        EventBridge bus
#   outbox-consumer      (+ outbox-consumer-dlq)      fed by rule outbox-order-events
#
# LocalStack runs this inside its container, where `awslocal` exists. The same
# script also works against any emulator from the host with the AWS CLI:
#   AWS_ENDPOINT_URL=http://127.0.0.1:4566 sh localstack/init/ready.d/01-resources.sh
# POSIX sh on purpose (MiniStack runs ready.d scripts with `sh`). Idempotent.
set -eu

REGION="${AWS_DEFAULT_REGION:-${AWS_REGION:-us-east-1}}"
MAX_RECEIVE_COUNT="${OUTBOX_MAX_RECEIVE_COUNT:-5}"
EVENT_SOURCE="${OUTBOX_EVENT_SOURCE:-outbox}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
export AWS_PAGER=""

if command -v awslocal >/dev/null 2>&1; then
  awsl() { awslocal --region "$REGION" "$@"; }
else
  awsl() { aws --endpoint-url "${AWS_ENDPOINT_URL:-http://localhost:4566}" --region "$REGION" "$@"; }
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT INT TERM

# create_queue NAME [ATTRIBUTES_FILE] -> prints the queue URL
create_queue() {
  if [ -n "${2:-}" ]; then
    awsl sqs create-queue --queue-name "$1" --attributes "file://$2" --query QueueUrl --output text
  else
    awsl sqs create-queue --queue-name "$1" --query QueueUrl --output text
  fi
}

queue_arn() {
  awsl sqs get-queue-attributes --queue-url "$1" --attribute-names QueueArn \
    --query Attributes.QueueArn --output text
}

# redrive_attrs FILE DLQ_ARN [EXTRA_JSON_MEMBERS]
redrive_attrs() {
  printf '{%s"RedrivePolicy": "{\\"deadLetterTargetArn\\":\\"%s\\",\\"maxReceiveCount\\":\\"%s\\"}"}\n' \
    "${3:-}" "$2" "$MAX_RECEIVE_COUNT" >"$1"
}

# --- standard outbox queue ---------------------------------------------------
events_dlq_url="$(create_queue outbox-events-dlq)"
redrive_attrs "$tmp/events.json" "$(queue_arn "$events_dlq_url")"
events_url="$(create_queue outbox-events "$tmp/events.json")"

# --- FIFO outbox queue (MessageGroupId = aggregate, dedupe id = event id) ----
cat >"$tmp/fifo-dlq.json" <<'JSON'
{"FifoQueue": "true"}
JSON
fifo_dlq_url="$(create_queue outbox-events-dlq.fifo "$tmp/fifo-dlq.json")"
redrive_attrs "$tmp/fifo.json" "$(queue_arn "$fifo_dlq_url")" \
  '"FifoQueue": "true", "ContentBasedDeduplication": "false", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId", '
fifo_url="$(create_queue outbox-events.fifo "$tmp/fifo.json")"

# --- consumer queue ----------------------------------------------------------
# serverless.yml sets VisibilityTimeout 180 (6x the Lambda timeout); locally the
# default 30 s keeps redelivery tests short.
consumer_dlq_url="$(create_queue outbox-consumer-dlq)"
consumer_dlq_arn="$(queue_arn "$consumer_dlq_url")"
redrive_attrs "$tmp/consumer.json" "$consumer_dlq_arn"
consumer_url="$(create_queue outbox-consumer "$tmp/consumer.json")"
consumer_arn="$(queue_arn "$consumer_url")"

# --- event bus and rule -------------------------------------------------------
if ! awsl events describe-event-bus --name outbox-bus >/dev/null 2>&1; then
  awsl events create-event-bus --name outbox-bus >/dev/null
fi
rule_arn="$(awsl events put-rule --name outbox-order-events --event-bus-name outbox-bus \
  --event-pattern "{\"source\":[\"$EVENT_SOURCE\"],\"detail-type\":[{\"prefix\":\"order.\"}]}" \
  --query RuleArn --output text)"
awsl events put-targets --rule outbox-order-events --event-bus-name outbox-bus \
  --targets "[{\"Id\":\"outbox-consumer\",\"Arn\":\"$consumer_arn\"}]" >/dev/null

# Same queue policy as in AWS (emulators accept it; AWS requires it).
cat >"$tmp/policy.json" <<JSON
{"Policy": "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Sid\":\"AllowOrderEventsRule\",\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"events.amazonaws.com\"},\"Action\":\"sqs:SendMessage\",\"Resource\":\"$consumer_arn\",\"Condition\":{\"ArnEquals\":{\"aws:SourceArn\":\"$rule_arn\"}}}]}"}
JSON
awsl sqs set-queue-attributes --queue-url "$consumer_url" --attributes "file://$tmp/policy.json"

echo "outbox resources ready:"
echo "  OutboxQueue      $events_url"
echo "  OutboxQueueDLQ   $events_dlq_url"
echo "  OutboxFifoQueue  $fifo_url"
echo "  OutboxFifoDLQ    $fifo_dlq_url"
echo "  ConsumerQueue    $consumer_url"
echo "  ConsumerDLQ      $consumer_dlq_url"
echo "  OutboxBus        outbox-bus"
echo "  OrderEventsRule  $rule_arn"
