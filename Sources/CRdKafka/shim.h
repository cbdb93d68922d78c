#ifndef HERALD_CRDKAFKA_SHIM_H
#define HERALD_CRDKAFKA_SHIM_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

/// rd_kafka_producev is variadic and so not callable from Swift; this fixed-arity wrapper
/// copies key and value, hands the headers to librdkafka on success (the caller keeps them on
/// failure) and attaches `opaque` to the delivery report.
static inline rd_kafka_resp_err_t herald_produce(rd_kafka_t *rk, const char *topic,
                                                 const void *key, size_t key_len,
                                                 const void *value, size_t value_len,
                                                 rd_kafka_headers_t *headers, void *opaque) {
    return rd_kafka_producev(rk,
                             RD_KAFKA_V_TOPIC(topic),
                             RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
                             RD_KAFKA_V_KEY((void *)key, key_len),
                             RD_KAFKA_V_VALUE((void *)value, value_len),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                             RD_KAFKA_V_HEADERS(headers),
                             RD_KAFKA_V_OPAQUE(opaque),
                             RD_KAFKA_V_END);
}

#endif
