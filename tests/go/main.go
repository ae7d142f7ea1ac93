// The official Go Event Hubs SDK (github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2,
// on go-amqp) as an independent peer of `hubhost hub`: each call does one thing a Go program
// does and prints what the SDK saw as JSON on stdout, for a Rust test to check.
// scripts/install-test-tools.sh downloads its modules (go.sum) into .tools/go.
//
// usage: eventhubs-peer CONNECTION_STRING HUB OP [ARGS...]
//
//	OP send COUNT TAG       COUNT events, event i to partition i mod the partition count, each
//	                        a JSON body {"tag", "i"}
//	OP receive PARTITION COUNT SECONDS
//	                        a partition client from the start: the events, with their sequence
//	                        numbers and offsets, and the partition's properties
//	OP properties           the hub's and each partition's properties
//	OP process OWNER STORAGE CONTAINER SECONDS CONSUMER_GROUP
//	                        a Processor with the blob checkpoint store: a line of JSON per
//	                        partition opened or closed and per event, checkpointing after each
//	                        batch, until SECONDS pass or stdin closes
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2/checkpoints"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

var printing sync.Mutex

func line(v any) {
	printing.Lock()
	defer printing.Unlock()
	out, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 4 {
		fail(errors.New("usage: eventhubs-peer CONNECTION_STRING HUB OP [ARGS...]"))
	}
	cs, hub, op, args := os.Args[1], os.Args[2], os.Args[3], os.Args[4:]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	switch op {
	case "send":
		count, _ := strconv.Atoi(args[0])
		err = send(ctx, cs, hub, count, args[1])
	case "receive":
		count, _ := strconv.Atoi(args[1])
		seconds, _ := strconv.Atoi(args[2])
		err = receive(ctx, cs, hub, args[0], count, seconds)
	case "properties":
		err = properties(ctx, cs, hub)
	case "process":
		seconds, _ := strconv.Atoi(args[3])
		err = process(ctx, cs, hub, args[0], args[1], args[2], seconds, args[4])
	default:
		err = fmt.Errorf("unknown op %s", op)
	}
	if err != nil {
		fail(err)
	}
}

func send(ctx context.Context, cs, hub string, count int, tag string) error {
	producer, err := azeventhubs.NewProducerClientFromConnectionString(cs, hub, nil)
	if err != nil {
		return err
	}
	defer producer.Close(ctx)
	props, err := producer.GetEventHubProperties(ctx, nil)
	if err != nil {
		return err
	}
	ids := props.PartitionIDs
	for p, id := range ids {
		batch, err := producer.NewEventDataBatch(ctx, &azeventhubs.EventDataBatchOptions{PartitionID: &id})
		if err != nil {
			return err
		}
		for i := p; i < count; i += len(ids) {
			body := fmt.Sprintf(`{"tag":%q,"i":%d}`, tag, i)
			if err := batch.AddEventData(&azeventhubs.EventData{Body: []byte(body)}, nil); err != nil {
				return err
			}
		}
		if batch.NumEvents() > 0 {
			if err := producer.SendEventDataBatch(ctx, batch, nil); err != nil {
				return err
			}
		}
	}
	line(map[string]any{"sent": count, "partitions": len(ids)})
	return nil
}

func describe(p azeventhubs.PartitionProperties) map[string]any {
	return map[string]any{
		"id":            p.PartitionID,
		"last_sequence": p.LastEnqueuedSequenceNumber,
		"last_offset":   p.LastEnqueuedOffset,
		"empty":         p.IsEmpty,
	}
}

func receive(ctx context.Context, cs, hub, partition string, count, seconds int) error {
	consumer, err := azeventhubs.NewConsumerClientFromConnectionString(cs, hub, azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		return err
	}
	defer consumer.Close(ctx)
	earliest := true
	client, err := consumer.NewPartitionClient(partition, &azeventhubs.PartitionClientOptions{
		StartPosition: azeventhubs.StartPosition{Earliest: &earliest},
	})
	if err != nil {
		return err
	}
	defer client.Close(ctx)
	events := []map[string]any{}
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	for len(events) < count && time.Now().Before(deadline) {
		wait, cancel := context.WithTimeout(ctx, 3*time.Second)
		received, err := client.ReceiveEvents(wait, count-len(events), nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		for _, e := range received {
			events = append(events, map[string]any{
				"body":     string(e.Body),
				"sequence": e.SequenceNumber,
				"offset":   e.Offset,
				"enqueued": e.EnqueuedTime,
			})
		}
	}
	props, err := consumer.GetPartitionProperties(ctx, partition, nil)
	if err != nil {
		return err
	}
	line(map[string]any{"events": events, "partition": describe(props)})
	return nil
}

func properties(ctx context.Context, cs, hub string) error {
	producer, err := azeventhubs.NewProducerClientFromConnectionString(cs, hub, nil)
	if err != nil {
		return err
	}
	defer producer.Close(ctx)
	props, err := producer.GetEventHubProperties(ctx, nil)
	if err != nil {
		return err
	}
	partitions := []map[string]any{}
	for _, id := range props.PartitionIDs {
		p, err := producer.GetPartitionProperties(ctx, id, nil)
		if err != nil {
			return err
		}
		partitions = append(partitions, describe(p))
	}
	line(map[string]any{"name": props.Name, "partition_ids": props.PartitionIDs, "partitions": partitions})
	return nil
}

// process runs a Processor beside others of its consumer group: load balancing every 2 s and
// ownership expiring after 10 s (the SDK's defaults are 10 s and 60 s), so that a test sees a
// takeover in seconds.
func process(ctx context.Context, cs, hub, owner, storage, containerName string, seconds int, group string) error {
	blobs, err := container.NewClientFromConnectionString(storage, containerName, nil)
	if err != nil {
		return err
	}
	store, err := checkpoints.NewBlobStore(blobs, nil)
	if err != nil {
		return err
	}
	consumer, err := azeventhubs.NewConsumerClientFromConnectionString(cs, hub, group, nil)
	if err != nil {
		return err
	}
	defer consumer.Close(context.Background())
	earliest := true
	processor, err := azeventhubs.NewProcessor(consumer, store, &azeventhubs.ProcessorOptions{
		UpdateInterval:              2 * time.Second,
		PartitionExpirationDuration: 10 * time.Second,
		StartPositions:              azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &earliest}},
	})
	if err != nil {
		return err
	}
	run, stop := context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	defer stop()
	// Until the test closes stdin (or kills the process), or SECONDS pass.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	go func() {
		for {
			client := processor.NextPartitionClient(run)
			if client == nil {
				return
			}
			go handle(run, owner, client)
		}
	}()
	line(map[string]any{"owner": owner, "started": true})
	if err := processor.Run(run); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		line(map[string]any{"owner": owner, "error": err.Error()})
	}
	line(map[string]any{"owner": owner, "stopped": true})
	return nil
}

func handle(ctx context.Context, owner string, client *azeventhubs.ProcessorPartitionClient) {
	id := client.PartitionID()
	line(map[string]any{"owner": owner, "opened": id})
	defer client.Close(context.Background())
	for {
		wait, cancel := context.WithTimeout(ctx, 2*time.Second)
		events, err := client.ReceiveEvents(wait, 100, nil)
		cancel()
		for _, e := range events {
			line(map[string]any{"owner": owner, "partition": id, "sequence": e.SequenceNumber, "body": string(e.Body)})
		}
		if len(events) > 0 {
			// Not the run's context: the last batch before a stop is checkpointed too.
			checkpoint, done := context.WithTimeout(context.Background(), 30*time.Second)
			err := client.UpdateCheckpoint(checkpoint, events[len(events)-1], nil)
			done()
			if err != nil {
				line(map[string]any{"owner": owner, "partition": id, "error": err.Error()})
			}
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			var ehErr *azeventhubs.Error
			reason := err.Error()
			if errors.As(err, &ehErr) && ehErr.Code == azeventhubs.ErrorCodeOwnershipLost {
				reason = "ownership lost"
			}
			line(map[string]any{"owner": owner, "closed": id, "reason": reason})
			return
		}
		if ctx.Err() != nil {
			line(map[string]any{"owner": owner, "closed": id, "reason": "stopped"})
			return
		}
	}
}
