import APNSCore
import DeviceTokenStore
import Foundation
#if OTLPTracing
import OTel
#endif
import PushPipeline
package import Logging

/// One JSON object per line on standard error: `ts`, `level`, `msg`, `label`, then metadata.
package struct JSONLogHandler: LogHandler {
    package var logLevel: Logger.Level
    package var metadata: Logger.Metadata = [:]
    package var metadataProvider: Logger.MetadataProvider?
    private let label: String

    package init(label: String, level: Logger.Level, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.logLevel = level
        self.metadataProvider = metadataProvider
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var object: [(String, String)] = [
            ("ts", Self.timestamp()),
            ("level", event.level.rawValue),
            ("msg", "\(event.message)"),
            ("label", label),
        ]
        let provided = metadataProvider?.get() ?? [:]
        let merged = metadata.merging(provided) { _, new in new }.merging(event.metadata ?? [:]) { _, new in new }
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            object.append((key, "\(value)"))
        }
        var line = "{"
        for (index, (key, value)) in object.enumerated() {
            if index > 0 { line += "," }
            line += JSONString.quoted(key) + ":" + JSONString.quoted(value)
        }
        line += "}\n"
        FileHandle.standardError.write(Data(line.utf8))
    }

    private static func timestamp() -> String {
        RFC3339.format(Timestamp.now())
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
        switch logFormat {
        case .json:
            LoggingSystem.bootstrap({ label, provider in JSONLogHandler(label: label, level: level, metadataProvider: provider) }, metadataProvider: provider)
        case .text:
            LoggingSystem.bootstrap(
                { label, provider in
                    var handler = StreamLogHandler.standardError(label: label, metadataProvider: provider)
                    handler.logLevel = level
                    return handler
                },
                metadataProvider: provider
            )
        }
    }
}
