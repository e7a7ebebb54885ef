/*
 * tidemark.h: score bids with a Tidemark checkpoint from C, Go (cgo),
 * Java (JNA / FFM), Python (ctypes) and anything else that calls C.
 *
 * Link with libtidemark_cabi (cargo build --release -p tidemark-cabi builds
 * target/release/libtidemark_cabi.so). The checkpoint format is in
 * docs/checkpoint-format.md; this library reads it with the same code as
 * `tidemark score`, so scores are identical (tests/fixtures/golden*).
 *
 * A scorer may be shared between threads. tidemark_reload swaps a newer
 * checkpoint in atomically while other threads go on scoring.
 * Every function that can fail takes err/err_len: on failure it writes a
 * NUL-terminated reason there (truncated to err_len; err may be NULL).
 */
#ifndef TIDEMARK_H
#define TIDEMARK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TidemarkScorer tidemark_scorer;

/* Loads a checkpoint file, or a directory's latest.tdm. NULL on failure. */
tidemark_scorer *tidemark_open(const char *path, char *err, size_t err_len);

/* Reads the checkpoint again (a directory: its newest latest.tdm) and swaps
 * it in. 0, or -1 on failure (the model in use stays). */
int tidemark_reload(const tidemark_scorer *s, char *err, size_t err_len);

/* Scores one bid, a JSON object of features (strings, numbers, bools):
 * out[i] = the probability of names[i], a target ("ctr", "cvr_short",
 * "cvr_long", ...) or "p_install" (ctr * (cvr_short + cvr_long)); NaN for a
 * name the checkpoint lacks. 0, or -1 on failure (malformed bid). */
int tidemark_score(const tidemark_scorer *s, const char *features_json,
                   const char *const *names, size_t n, double *out,
                   char *err, size_t err_len);

/* Scores one bid as `tidemark score` prints it: a JSON object of every
 * target and "p_install", NUL-terminated in out. Its length, or -1 on
 * failure (malformed bid, or out_len too small: err says what is needed). */
int tidemark_score_json(const tidemark_scorer *s, const char *features_json,
                        char *out, size_t out_len, char *err, size_t err_len);

/* When the model in use was written, ms since the epoch; -1 for NULL. */
int64_t tidemark_created_at_ms(const tidemark_scorer *s);

/* Frees a scorer; NULL is ignored. */
void tidemark_free(tidemark_scorer *s);

#ifdef __cplusplus
}
#endif

#endif /* TIDEMARK_H */
