package natslog

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"astro/events"
)

// CloudEvents 1.0 attributes in binary mode, plus Astro's extensions.
const (
	hSpecVersion   = "ce-specversion"
	hID            = "ce-id"
	hSource        = "ce-source"
	hType          = "ce-type"
	hSubject       = "ce-subject"
	hTime          = "ce-time"
	hContentType   = "ce-datacontenttype"
	hDataSchema    = "ce-dataschema"
	hWorkspace     = "ce-workspaceid"
	hActor         = "ce-actorid"
	hIntegration   = "ce-integrationname"
	hCorrelation   = "ce-correlationid"
	hSchemaVersion = "ce-schemaversion"
)

// DataSchema is the ce-dataschema of an event type at a version; the JSON
// Schema documents in the repository are named after it.
func DataSchema(typ string, version int) string {
	return fmt.Sprintf("urn:astro:events:%s:v%d", typ, version)
}

// Encode turns an event into the message stored in the log.
func Encode(e events.Event) *nats.Msg {
	m := nats.NewMsg(events.Subject(e.WorkspaceID, e.Aggregate))
	m.Data = e.Data
	h := m.Header
	h.Set(nats.MsgIdHdr, e.ID)
	h.Set(hSpecVersion, "1.0")
	h.Set(hID, e.ID)
	h.Set(hSource, "/astro/workspaces/"+e.WorkspaceID)
	h.Set(hType, e.Type)
	h.Set(hSubject, e.Aggregate.Kind+"/"+e.Aggregate.ID)
	h.Set(hTime, e.Time.UTC().Format(time.RFC3339Nano))
	h.Set(hContentType, "application/json")
	h.Set(hDataSchema, DataSchema(e.Type, e.Version))
	h.Set(hWorkspace, e.WorkspaceID)
	h.Set(hActor, e.ActorID)
	if e.Integration != "" {
		h.Set(hIntegration, e.Integration)
	}
	if e.CorrelationID != "" {
		h.Set(hCorrelation, e.CorrelationID)
	}
	h.Set(hSchemaVersion, strconv.Itoa(e.Version))
	return m
}

// Decode reads an event from a stored message's subject, headers and data.
func Decode(subject string, h nats.Header, data []byte, seq uint64) (events.Event, error) {
	e, err := decode(subject, h, data, seq)
	if err != nil {
		return e, fmt.Errorf("%w: %w", events.ErrMalformed, err)
	}
	return e, nil
}

func decode(subject string, h nats.Header, data []byte, seq uint64) (events.Event, error) {
	ws, agg, err := events.ParseSubject(subject)
	if err != nil {
		return events.Event{}, err
	}
	e := events.Event{
		ID:            h.Get(hID),
		Type:          h.Get(hType),
		WorkspaceID:   ws,
		Aggregate:     agg,
		ActorID:       h.Get(hActor),
		Integration:   h.Get(hIntegration),
		CorrelationID: h.Get(hCorrelation),
		Data:          data,
		Seq:           seq,
	}
	if e.ID == "" || e.Type == "" {
		return e, fmt.Errorf("seq %d: missing ce-id or ce-type", seq)
	}
	if e.Version, err = strconv.Atoi(h.Get(hSchemaVersion)); err != nil {
		return e, fmt.Errorf("seq %d: bad %s: %w", seq, hSchemaVersion, err)
	}
	if e.Time, err = time.Parse(time.RFC3339Nano, h.Get(hTime)); err != nil {
		return e, fmt.Errorf("seq %d: bad %s: %w", seq, hTime, err)
	}
	return e, nil
}
