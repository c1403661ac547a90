package datastore

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes a datastore's Status as Prometheus gauges, read at scrape
// time so the numbers are never older than the scrape.
type Collector struct {
	ds    Datastore
	descs collectorDescs
}

type collectorDescs struct {
	up, dbSize, dbFree, walSize, volSize, volFree, rev, compactRev *prometheus.Desc
}

// NewCollector returns a collector for ds. Register it with a registry that
// serves /metrics.
func NewCollector(ds Datastore) *Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("k3k_datastore_"+name, help, []string{"kind"}, nil)
	}
	return &Collector{ds: ds, descs: collectorDescs{
		up:         d("status_up", "1 when the last status read succeeded."),
		dbSize:     d("db_size_bytes", "Size of the database file."),
		dbFree:     d("db_free_bytes", "Free pages inside the database file, reused by new writes."),
		walSize:    d("wal_size_bytes", "Size of the write-ahead log."),
		volSize:    d("volume_size_bytes", "Size of the filesystem holding the data directory."),
		volFree:    d("volume_free_bytes", "Free bytes of the filesystem holding the data directory."),
		rev:        d("revision", "Current etcd revision."),
		compactRev: d("compact_revision", "Revision history is compacted up to."),
	}}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.descs.up, c.descs.dbSize, c.descs.dbFree, c.descs.walSize,
		c.descs.volSize, c.descs.volFree, c.descs.rev, c.descs.compactRev} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	st, err := c.ds.Status(ctx)
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, st.Kind)
	}
	if err != nil {
		gauge(c.descs.up, 0)
		return
	}
	gauge(c.descs.up, 1)
	gauge(c.descs.dbSize, float64(st.DBSizeBytes))
	gauge(c.descs.dbFree, float64(st.DBFreeBytes))
	gauge(c.descs.walSize, float64(st.WALSizeBytes))
	gauge(c.descs.volSize, float64(st.VolumeSizeBytes))
	gauge(c.descs.volFree, float64(st.VolumeFreeBytes))
	gauge(c.descs.rev, float64(st.Revision))
	gauge(c.descs.compactRev, float64(st.CompactRevision))
}
