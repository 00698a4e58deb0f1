import ZoneFeed

/// What a destination does with what its record-type mapping does not foresee, from the
/// pipeline file's top-level keys `schemaEvolution`, `unmappedFields`, `unknownRecordTypes` and
/// `onBadRecord`. Any destination that maps record types to tables reads them here, so the keys
/// mean the same whichever destination a pipeline names.
public struct RecordMappingPolicies: Sendable, Equatable {
    /// Whether fields and record types the mapping lacks become columns and tables as they
    /// appear (`evolve`) or go to the fields column and `unknownRecordTypes` (`freeze`).
    public var schemaEvolution: SchemaEvolution
    public var unmappedFields: UnmappedFields
    public var unknownRecordTypes: UnknownRecordTypes
    public var onBadRecord: OnBadRecord

    public enum UnmappedFields: String, Sendable, CaseIterable { case keep, drop }
    public enum UnknownRecordTypes: String, Sendable, CaseIterable { case skip, reject }
    public enum OnBadRecord: String, Sendable, CaseIterable { case reject, fail }
    public enum SchemaEvolution: String, Sendable, CaseIterable { case evolve, freeze }

    public init(
        schemaEvolution: SchemaEvolution = .freeze, unmappedFields: UnmappedFields = .keep, unknownRecordTypes: UnknownRecordTypes = .skip,
        onBadRecord: OnBadRecord = .reject
    ) {
        self.schemaEvolution = schemaEvolution
        self.unmappedFields = unmappedFields
        self.unknownRecordTypes = unknownRecordTypes
        self.onBadRecord = onBadRecord
    }

    /// `evolve` when the tables come from a schema file or from the records themselves (such
    /// schemas only grow, and so must their tables); `freeze` when every column is written out.
    public static func defaultSchemaEvolution(schemaFile: String?, auto: Bool) -> SchemaEvolution {
        schemaFile != nil || auto ? .evolve : .freeze
    }

    public var evolves: Bool { schemaEvolution == .evolve }

    /// Reads the four keys from the top level of a pipeline file whose record types come from
    /// `schemaFile` or are `auto`; nil, with the problems reported, when one is refused.
    public static func read(in top: PipelineSection, from file: PipelineFileReader, schemaFile: String?, auto: Bool) -> RecordMappingPolicies? {
        let reported = file.diagnostics.count
        let evolution = file.choice(SchemaEvolution.self, "schemaEvolution", in: top)
        let unmappedFields = file.choice(UnmappedFields.self, "unmappedFields", in: top)
        let unknownRecordTypes = file.choice(UnknownRecordTypes.self, "unknownRecordTypes", in: top)
        let onBadRecord = file.choice(OnBadRecord.self, "onBadRecord", in: top)
        if auto && evolution == .freeze {
            file.report(
                "recordTypes: auto makes a table for each record type as it appears, which schemaEvolution: freeze forbids: "
                    + "remove schemaEvolution, or map the record types", at: top["schemaEvolution"]!.valuePosition)
        }
        guard file.diagnostics.count == reported else { return nil }
        var policies = RecordMappingPolicies(schemaEvolution: evolution ?? defaultSchemaEvolution(schemaFile: schemaFile, auto: auto))
        if let unmappedFields { policies.unmappedFields = unmappedFields }
        if let unknownRecordTypes { policies.unknownRecordTypes = unknownRecordTypes }
        if let onBadRecord { policies.onBadRecord = onBadRecord }
        return policies
    }

    /// The four keys, for the reference of a destination that reads them.
    public static let referenceKeys: [PipelineKey] = [
        .choice(
            "schemaEvolution", SchemaEvolution.self, default: "freeze for a written-out mapping, evolve for auto and schemaFile",
            "Whether new fields and record types become columns and tables."),
        .choice("unmappedFields", UnmappedFields.self, default: "keep", "A field without a column: kept in the fields jsonb column, or dropped."),
        .choice(
            "unknownRecordTypes", UnknownRecordTypes.self, default: "skip",
            "A record type without a table: skipped (counted), or to zonefeed_rejects; not used when evolving."),
        .choice(
            "onBadRecord", OnBadRecord.self, default: "reject", "A record that does not fit: to zonefeed_rejects while the run goes on, or the run fails."),
    ]
}
