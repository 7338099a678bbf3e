/* The summary `ploop send` and `ploop receive` print. */
#include "stream-cli.h"

#include <inttypes.h>

#include "common.h"

void stream_cli_summary(const char *verb, const struct ploop_stream_stats *s, const char *guid, bool json,
                        FILE *json_out)
{
  bool sent = verb[0] == 's';
  if (!guid)
    guid = s->guid;
  if (json) {
    fprintf(json_out,
            "{\"%s\": %" PRIu64 ", \"clusters\": %" PRIu64 ", \"data_bytes\": %" PRIu64
            ", \"seconds\": %.3f, \"guid\": ",
            sent ? "bytes_sent" : "bytes_received", s->bytes, s->clusters, s->data_bytes, s->seconds);
    cli_json_string(json_out, guid);
    fputs("}\n", json_out);
    fflush(json_out);
    return;
  }
  char b[32], r[32];
  double rate = s->seconds > 0 ? (double)s->bytes / s->seconds : 0;
  fprintf(stderr, "%s %s: %s %s, %" PRIu64 " clusters, %s/s, %.2f s\n", verb, guid,
          cli_human_bytes(s->bytes, b, sizeof b), sent ? "sent" : "received", s->clusters,
          cli_human_bytes((uint64_t)rate, r, sizeof r), s->seconds);
}
