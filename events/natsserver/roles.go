package natsserver

import (
	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/crypto/bcrypt"
)

// The users of an Astro NATS server, one per kind of client. The embedded
// server knows exactly these; deploy/nats-server.conf declares the same
// users with the same permissions for an external server.
const (
	// UserAstro is Astro itself: it owns the streams, buckets and
	// projector consumers, and answers commands. Full rights.
	UserAstro = "astro"
	// UserConsumer is a downstream consumer of events: it reads the event
	// stream and runs durable consumers of its own on it, nothing else.
	UserConsumer = "consumer"
	// UserService is an upstream service: it sends commands and reads the
	// replies, nothing else.
	UserService = "service"
)

// InboxPrefix is where a restricted user receives replies, and what it
// sets in its connection (nats.CustomInboxPrefix). A client that may
// subscribe to the shared "_INBOX.>" would receive every reply in the
// account (Astro's own snapshot and idempotency reads among them), so each
// user gets replies under a prefix of its own.
func InboxPrefix(user string) string { return "_INBOX_" + user }

// Subjects the permissions are written for.
const (
	eventSubjects   = "astro.events.>"
	commandSubjects = "astro.commands.>"
)

// eventStreams are the streams a consumer reads: the history, and the
// inboxes (natslog's defaults).
var eventStreams = []string{"ASTRO_HISTORY", "ASTRO_INBOXES"}

// Passwords holds a password per user; an empty one leaves the user out.
type Passwords struct {
	Astro, Consumer, Service string
}

// Permissions returns the permissions of user (nil for Astro, which has
// every right). protected names Astro's own durable consumers on the event
// stream, which no consumer may create, read from, acknowledge on, or
// delete.
func Permissions(user string, protected []string) *server.Permissions {
	switch user {
	case UserConsumer:
		api := "$JS.API."
		var allow, deny []string
		allow = append(allow, api+"INFO")
		for _, stream := range eventStreams {
			allow = append(allow,
				api+"STREAM.INFO."+stream,
				api+"STREAM.MSG.GET."+stream,
				api+"DIRECT.GET."+stream,
				api+"DIRECT.GET."+stream+".>",
				api+"CONSUMER.CREATE."+stream+".>",
				api+"CONSUMER.DURABLE.CREATE."+stream+".*",
				api+"CONSUMER.INFO."+stream+".*",
				api+"CONSUMER.DELETE."+stream+".*",
				api+"CONSUMER.MSG.NEXT."+stream+".*",
				"$JS.ACK."+stream+".>",
			)
			for _, name := range protected {
				deny = append(deny,
					api+"CONSUMER.*."+stream+"."+name,      // CREATE, INFO, DELETE, PAUSE…
					api+"CONSUMER.*."+stream+"."+name+".>", // CREATE with a filter
					api+"CONSUMER.*.*."+stream+"."+name,    // MSG.NEXT, DURABLE.CREATE…
					"$JS.ACK."+stream+"."+name+".>",
				)
			}
		}
		return &server.Permissions{
			Publish: &server.SubjectPermission{Allow: allow, Deny: deny},
			Subscribe: &server.SubjectPermission{
				Allow: []string{eventSubjects, InboxPrefix(UserConsumer) + ".>"},
			},
		}
	case UserService:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{commandSubjects}},
			Subscribe: &server.SubjectPermission{Allow: []string{InboxPrefix(UserService) + ".>"}},
		}
	}
	return nil
}

// users builds the server's users from the passwords. The server gets
// them as bcrypt hashes, of the lowest cost: they are long and random, so
// the hash has nothing to slow down, and a plaintext one makes the server
// warn at every start.
func users(p Passwords, protected []string) []*server.User {
	var out []*server.User
	for _, u := range []struct{ name, password string }{
		{UserAstro, p.Astro}, {UserConsumer, p.Consumer}, {UserService, p.Service},
	} {
		if u.password == "" {
			continue
		}
		password := u.password
		if hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost); err == nil {
			password = string(hash) // else over bcrypt's 72 bytes: kept as it is
		}
		out = append(out, &server.User{Username: u.name, Password: password, Permissions: Permissions(u.name, protected)})
	}
	return out
}
