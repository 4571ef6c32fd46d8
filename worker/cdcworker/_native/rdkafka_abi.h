/*
 * The librdkafka API subset kafkaprod.c uses, declared by hand: the library is the one
 * confluent-kafka bundles, resolved with dlopen/dlsym at run time, so nothing is linked or
 * vendored at build time and no rdkafka.h is needed to build. These declarations must match that
 * library's rdkafka.h: abi_check/rdkafka_abi_check.c compiles them against a real rdkafka.h with
 * static assertions on every field offset and size, constant and function signature
 * (tests/test_rdkafka_abi.py), so an upgrade that moves a field fails a test instead of
 * corrupting memory.
 *
 * The check defines RK_ABI_CHECK and, before including this file, maps the opaque handles and the
 * enum types to rdkafka.h's own (rk_t to rd_kafka_t, RK_ERR to rd_kafka_resp_err_t...).
 */
#ifndef CDCWORKER_RDKAFKA_ABI_H
#define CDCWORKER_RDKAFKA_ABI_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef RK_ABI_CHECK
typedef struct rk_s rk_t;
typedef struct rk_conf_s rk_conf_t;
typedef struct rk_topic_s rk_topic_t;
typedef struct rk_error_s rk_error_t;
typedef struct rk_headers_s rk_headers_t;
#define RK_ERR int      /* rd_kafka_resp_err_t */
#define RK_CONF_RES int /* rd_kafka_conf_res_t */
#define RK_TYPE int     /* rd_kafka_type_t */
#define RK_MESSAGE rk_message_t
#define RK_VU rk_vu_t
#endif

/* rd_kafka_message_t */
typedef struct {
    int err;
    rk_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rk_message_t;

/* rd_kafka_vtype_t */
enum { VT_END = 0, VT_TOPIC = 1, VT_RKT, VT_PARTITION, VT_VALUE, VT_KEY, VT_OPAQUE, VT_MSGFLAGS,
       VT_TIMESTAMP, VT_HEADER, VT_HEADERS };

/* rd_kafka_vu_t */
typedef struct {
    int vtype;
    union {
        const char *cstr;
        int i;
        int32_t i32;
        struct { void *ptr; size_t size; } mem;
        rk_headers_t *headers;
        void *ptr;
        char _pad[64];
    } u;
} rk_vu_t;

/* rd_kafka_resp_err_t codes, message flags and the client type used */
#define ERR_AUTHENTICATION (-169) /* RD_KAFKA_RESP_ERR__AUTHENTICATION */
#define ERR_SSL (-181)            /* RD_KAFKA_RESP_ERR__SSL */
#define ERR_QUEUE_FULL (-184)     /* RD_KAFKA_RESP_ERR__QUEUE_FULL */
#define ERR_INVALID_ARG (-186)    /* RD_KAFKA_RESP_ERR__INVALID_ARG */
#define MSG_F_FREE 0x1            /* RD_KAFKA_MSG_F_FREE */
#define MSG_F_COPY 0x2            /* RD_KAFKA_MSG_F_COPY */
#define RK_PRODUCER 0             /* RD_KAFKA_PRODUCER */

/* X(field in the function table, librdkafka symbol, return type, parameter list) */
#define RK_FUNCTIONS(X)                                                                                   \
    X(conf_new, rd_kafka_conf_new, rk_conf_t *, (void))                                                   \
    X(conf_set, rd_kafka_conf_set, RK_CONF_RES, (rk_conf_t *, const char *, const char *, char *, size_t)) \
    X(conf_destroy, rd_kafka_conf_destroy, void, (rk_conf_t *))                                           \
    X(conf_set_dr_msg_cb, rd_kafka_conf_set_dr_msg_cb, void,                                              \
      (rk_conf_t *, void (*)(rk_t *, const RK_MESSAGE *, void *)))                                        \
    X(conf_set_error_cb, rd_kafka_conf_set_error_cb, void,                                                \
      (rk_conf_t *, void (*)(rk_t *, int, const char *, void *)))                                         \
    X(conf_set_opaque, rd_kafka_conf_set_opaque, void, (rk_conf_t *, void *))                             \
    X(conf_set_log_cb, rd_kafka_conf_set_log_cb, void,                                                    \
      (rk_conf_t *, void (*)(const rk_t *, int, const char *, const char *)))                             \
    X(opaque, rd_kafka_opaque, void *, (const rk_t *))                                                    \
    X(new_, rd_kafka_new, rk_t *, (RK_TYPE, rk_conf_t *, char *, size_t))                                 \
    X(destroy, rd_kafka_destroy, void, (rk_t *))                                                          \
    X(produceva, rd_kafka_produceva, rk_error_t *, (rk_t *, const RK_VU *, size_t))                       \
    X(poll, rd_kafka_poll, int, (rk_t *, int))                                                            \
    X(flush, rd_kafka_flush, RK_ERR, (rk_t *, int))                                                       \
    X(outq_len, rd_kafka_outq_len, int, (rk_t *))                                                         \
    X(error_code, rd_kafka_error_code, RK_ERR, (const rk_error_t *))                                      \
    X(error_string, rd_kafka_error_string, const char *, (const rk_error_t *))                           \
    X(error_is_fatal, rd_kafka_error_is_fatal, int, (const rk_error_t *))                                 \
    X(error_is_retriable, rd_kafka_error_is_retriable, int, (const rk_error_t *))                         \
    X(error_txn_requires_abort, rd_kafka_error_txn_requires_abort, int, (const rk_error_t *))             \
    X(error_destroy, rd_kafka_error_destroy, void, (rk_error_t *))                                        \
    X(headers_new, rd_kafka_headers_new, rk_headers_t *, (size_t))                                        \
    X(header_add, rd_kafka_header_add, RK_ERR, (rk_headers_t *, const char *, ssize_t, const void *, ssize_t)) \
    X(headers_copy, rd_kafka_headers_copy, rk_headers_t *, (const rk_headers_t *))                        \
    X(headers_destroy, rd_kafka_headers_destroy, void, (rk_headers_t *))                                  \
    X(message_detach_headers, rd_kafka_message_detach_headers, RK_ERR, (RK_MESSAGE *, rk_headers_t **))   \
    X(topic_name, rd_kafka_topic_name, const char *, (const rk_topic_t *))                                \
    X(err2str, rd_kafka_err2str, const char *, (RK_ERR))                                                  \
    X(fatal_error, rd_kafka_fatal_error, RK_ERR, (rk_t *, char *, size_t))                                \
    X(init_transactions, rd_kafka_init_transactions, rk_error_t *, (rk_t *, int))                         \
    X(begin_transaction, rd_kafka_begin_transaction, rk_error_t *, (rk_t *))                              \
    X(commit_transaction, rd_kafka_commit_transaction, rk_error_t *, (rk_t *, int))                       \
    X(abort_transaction, rd_kafka_abort_transaction, rk_error_t *, (rk_t *, int))

#endif
