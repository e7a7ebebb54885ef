/* Score bids with a Tidemark checkpoint from C: one JSON object of features
 * per stdin line in, one JSON line of predictions out, as `tidemark score`.
 *
 *   cargo build --release -p tidemark-cabi
 *   cc examples/score.c -I crates/tidemark-cabi/include \
 *      -L target/release -ltidemark_cabi -o score
 *   LD_LIBRARY_PATH=target/release ./score checkpoints/ < bids.jsonl
 */
#include <stdio.h>
#include <string.h>

#include "tidemark.h"

int main(int argc, char **argv) {
    char err[512], out[4096], line[65536];
    if (argc != 2) {
        fprintf(stderr, "usage: %s CHECKPOINT < bids.jsonl\n", argv[0]);
        return 2;
    }
    tidemark_scorer *s = tidemark_open(argv[1], err, sizeof err);
    if (!s) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        if (tidemark_score_json(s, line, out, sizeof out, err, sizeof err) < 0)
            printf("{\"error\": \"%s\"}\n", err);
        else
            printf("%s\n", out);
    }
    tidemark_free(s);
    return 0;
}
