import JSONCore
import APNSCore
import PushStores
#if OTLPTracing
import OTel
#endif
import PushPipeline
package import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Herald's log lines: one JSON object per line (`ts`, `level`, `msg`, `label`, then metadata)
/// or one line of text, handed to a ``LogLineWriter``, so a slow log pipe never blocks the
/// thread that logs (a NIO event loop carrying APNs connections, say).
package struct LineLogHandler: LogHandler {
    package var logLevel: Logger.Level
    package var metadata: Logger.Metadata = [:]
    package var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let format: HeraldConfiguration.LogFormat
    private let writer: LogLineWriter

    package init(
        label: String,
        level: Logger.Level,
        format: HeraldConfiguration.LogFormat,
        writer: LogLineWriter = .standardError,
        metadataProvider: Logger.MetadataProvider? = nil
    ) {
        self.label = label
        self.logLevel = level
        self.format = format
        self.writer = writer
        self.metadataProvider = metadataProvider
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        let provided = metadataProvider?.get() ?? [:]
        let merged = metadata.merging(provided) { _, new in new }.merging(event.metadata ?? [:]) { _, new in new }
        let fields = merged.sorted(by: { $0.key < $1.key })
        let timestamp = RFC3339.format(Timestamp.now())
        switch format {
        case .json:
            var line = "{\"ts\":" + JSONString.quoted(timestamp) + ",\"level\":" + JSONString.quoted(event.level.rawValue)
            line += ",\"msg\":" + JSONString.quoted("\(event.message)") + ",\"label\":" + JSONString.quoted(label)
            for (key, value) in fields { line += "," + JSONString.quoted(key) + ":" + JSONString.quoted("\(value)") }
            writer.write(line + "}\n")
        case .text:
            let pairs = fields.map { " \($0.key)=\($0.value)" }.joined()
            writer.write("\(timestamp) \(event.level) \(label):\(pairs) \(event.message)\n")
        }
    }
}

extension HeraldConfiguration {
    /// Installs the configured log format and level for the whole process.
    /// Bootstraps swift-log with the configured format and level; lines about an event name it
    /// (`push.event_id`) and, when it is traced, its trace (`trace_id`, `span_id`).
    package func bootstrapLogging() {
        let level = logLevel
        #if OTLPTracing
        let provider = Logger.MetadataProvider.multiplex([.heraldEvent, OTel.makeLoggingMetadataProvider()])
        #else
        let provider = Logger.MetadataProvider.heraldEvent
        #endif
        let format = logFormat
        LoggingSystem.bootstrap(
            { label, provider in LineLogHandler(label: label, level: level, format: format, metadataProvider: provider) },
            metadataProvider: provider
        )
        // Lines still queued when the process exits (a subcommand's last words) are written first.
        atexit { LogLineWriter.standardError.flush() }
    }
}
