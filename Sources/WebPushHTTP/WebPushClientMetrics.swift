// WebPushClientMetrics.swift: what the web push client's requests and connections do, through
// swift-metrics.

import Metrics

/// What the web push client does, through swift-metrics, over every push service origin (no
/// per-host label: the allow-list's wildcards let the hosts grow without bound):
///
/// - `herald_webpush_request_duration_seconds{outcome}`: one send request, from the POST to its
///   answer; `outcome` is `answered` (any HTTP status) or `transport_error`.
/// - `herald_webpush_connections` and `herald_webpush_streams_in_use` (gauges, refreshed by
///   ``WebPushHTTPClient/recordPoolState()``), `herald_webpush_goaways_total`.
final class WebPushClientMetrics: Sendable {
    private let answered: Timer
    private let transportError: Timer
    private let connections: Gauge
    private let streamsInUse: Gauge
    let goAways: Counter

    init(factory: any MetricsFactory) {
        answered = Timer(label: "herald_webpush_request_duration_seconds", dimensions: [("outcome", "answered")], factory: factory)
        transportError = Timer(label: "herald_webpush_request_duration_seconds", dimensions: [("outcome", "transport_error")], factory: factory)
        connections = Gauge(label: "herald_webpush_connections", factory: factory)
        streamsInUse = Gauge(label: "herald_webpush_streams_in_use", factory: factory)
        goAways = Counter(label: "herald_webpush_goaways_total", factory: factory)
    }

    /// Records the connections open to push services and the streams in use on them.
    func recordUsage(connections open: Int, streamsInUse streams: Int) {
        connections.record(open)
        streamsInUse.record(streams)
    }

    /// Records one send request that took `duration`.
    func request(duration: Duration, answered wasAnswered: Bool) {
        (wasAnswered ? answered : transportError).record(duration: duration)
    }
}
