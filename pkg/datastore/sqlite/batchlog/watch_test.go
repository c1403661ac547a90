package batchlog

import (
	"testing"
	"time"

	"github.com/k3s-io/kine/pkg/server"
)

func events(from, to int64) []*server.Event {
	var out []*server.Event
	for r := from; r <= to; r++ {
		out = append(out, &server.Event{KV: &server.KeyValue{Key: "/k", Value: []byte("v"), ModRevision: r}})
	}
	return out
}

// The ring answers a watcher from where it is when it holds every event
// after it, sends it to the table otherwise, and is empty once idle.
func TestTheRingServesOnlyWhatItHoldsWhole(t *testing.T) {
	br := newBroadcaster()
	br.start(10)
	if got, inRing, _, _ := br.since(10); !inRing || len(got) != 0 {
		t.Fatalf("a watcher at the current revision: %d events, in ring %v; want none, true", len(got), inRing)
	}
	br.publish(events(11, 13), 13)
	cases := []struct {
		name   string
		last   int64
		inRing bool
		first  int64
		n      int
	}{
		{"a watcher right behind gets the ring's events after it", 11, true, 12, 2},
		{"a watcher just before the ring gets all of it", 10, true, 11, 3},
		{"a watcher before the ring's oldest event goes to the table", 9, false, 0, 0},
		{"a watcher at the end waits", 13, true, 0, 0},
	}
	for _, c := range cases {
		got, inRing, current, _ := br.since(c.last)
		if inRing != c.inRing || len(got) != c.n || current != 13 || (c.n > 0 && got[0].KV.ModRevision != c.first) {
			t.Errorf("%s: got %d events (in ring %v, current %d)", c.name, len(got), inRing, current)
		}
	}
	br.dropIfIdle(time.Now())
	if _, inRing, _, _ := br.since(11); !inRing {
		t.Fatalf("the ring was emptied while not idle")
	}
	br.dropIfIdle(time.Now().Add(2 * ringIdle))
	if _, inRing, _, _ := br.since(11); inRing {
		t.Fatalf("an idle ring still serves events")
	}
	if _, inRing, _, _ := br.since(13); !inRing {
		t.Fatalf("after the ring emptied, a watcher at the current revision must wait, not read the table")
	}
	br.publish(events(14, 14), 14)
	if got, inRing, _, _ := br.since(13); !inRing || len(got) != 1 {
		t.Fatalf("after new writes a watcher at the old end reads the ring: %d events, in ring %v", len(got), inRing)
	}
}

// The ring keeps at most ringBytes of values (and always the newest event).
func TestTheRingDropsItsOldestEventsBeyondItsSize(t *testing.T) {
	br := newBroadcaster()
	big := make([]byte, ringBytes/4)
	var evs []*server.Event
	for r := int64(1); r <= 8; r++ {
		evs = append(evs, &server.Event{KV: &server.KeyValue{Key: "/k", Value: big, ModRevision: r}})
	}
	br.publish(evs, 8)
	if br.bytes > ringBytes || len(br.ring) == 0 || br.ring[len(br.ring)-1].KV.ModRevision != 8 {
		t.Fatalf("ring holds %d bytes in %d events", br.bytes, len(br.ring))
	}
	if _, inRing, _, _ := br.since(1); inRing {
		t.Fatalf("a dropped event is still served from the ring")
	}
}
