// Command example-sender is an upstream service sending a notification to
// Astro over NATS, as short as one can be: a request on the send subject
// with the service's bearer token in the Authorization header, answered
// with the same envelope as POST /api/data/notifications.
//
// It connects as the service user, with the URL `astro nats-credentials
// --role service --url` prints, and receives the reply under that user's
// inbox prefix, "_INBOX_service", the only one its permissions allow.
//
//	go run ./cmd/example-sender -nats "$(go run ./cmd/astro nats-credentials --role service --url)" \
//	  -token "$SVC" '{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task.assigned","subject":"New task","message":"Hi"}'
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL with user:password@ ($NATS_URL)")
	token := flag.String("token", os.Getenv("ASTRO_TOKEN"), "bearer token with notifications:send ($ASTRO_TOKEN)")
	inbox := flag.String("inbox-prefix", "_INBOX_service", "where the reply comes: the prefix the user's permissions allow")
	integration := flag.String("integration", "example-sender", "x-integration-name recorded on the event")
	flag.Parse()
	if *url == "" || *token == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: example-sender -nats URL -token JWT 'JSON body'")
		os.Exit(2)
	}
	if err := run(*url, *inbox, *token, *integration, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "example-sender:", err)
		os.Exit(1)
	}
}

func run(url, inbox, token, integration, body string) error {
	nc, err := nats.Connect(url, nats.CustomInboxPrefix(inbox))
	if err != nil {
		return err
	}
	defer nc.Close()
	msg := nats.NewMsg("astro.commands.notifications.send")
	msg.Header.Set("Authorization", "Bearer "+token)
	msg.Header.Set("x-integration-name", integration)
	msg.Data = []byte(body)
	reply, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		return err
	}
	fmt.Println(string(reply.Data))
	return nil
}
