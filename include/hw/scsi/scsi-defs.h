/*
 * SCSI constants: operation codes, sense keys, additional sense codes,
 * VPD and mode page codes, and the bits of the fields Spindle reads or
 * writes.
 *
 * Sources: SPC-4 (primary commands, sense data, INQUIRY, VPD, mode
 * parameters) and SBC-3 (block commands, block VPD pages, the caching
 * mode page).  Plain definitions only, shared by the SCSI disk
 * (hw/scsi/), the virtio-scsi device and the test front-ends.  Byte
 * offsets are from the start of the CDB, page or parameter list; every
 * multi-byte field in SCSI is big-endian.  The SAM status codes live in
 * hw/scsi/scsi-disk.h.
 */
#ifndef SPINDLE_HW_SCSI_SCSI_DEFS_H
#define SPINDLE_HW_SCSI_SCSI_DEFS_H

/* ------------------------------------------------------------------------ */
/* Operation codes                                                           */

#define SCSI_OP_TEST_UNIT_READY         0x00
#define SCSI_OP_REQUEST_SENSE           0x03
#define SCSI_OP_READ_6                  0x08
#define SCSI_OP_WRITE_6                 0x0a
#define SCSI_OP_INQUIRY                 0x12
#define SCSI_OP_MODE_SELECT_6           0x15
#define SCSI_OP_MODE_SENSE_6            0x1a
#define SCSI_OP_START_STOP_UNIT         0x1b
#define SCSI_OP_PREVENT_ALLOW_MEDIUM_REMOVAL 0x1e
#define SCSI_OP_READ_CAPACITY_10        0x25
#define SCSI_OP_READ_10                 0x28
#define SCSI_OP_WRITE_10                0x2a
#define SCSI_OP_VERIFY_10               0x2f
#define SCSI_OP_SYNCHRONIZE_CACHE_10    0x35
#define SCSI_OP_WRITE_SAME_10           0x41
#define SCSI_OP_UNMAP                   0x42
#define SCSI_OP_MODE_SELECT_10          0x55
#define SCSI_OP_MODE_SENSE_10           0x5a
#define SCSI_OP_VARIABLE_LENGTH         0x7f   /* 32-byte CDBs */
#define SCSI_OP_READ_16                 0x88
#define SCSI_OP_WRITE_16                0x8a
#define SCSI_OP_VERIFY_16               0x8f
#define SCSI_OP_SYNCHRONIZE_CACHE_16    0x91
#define SCSI_OP_WRITE_SAME_16           0x93
#define SCSI_OP_SERVICE_ACTION_IN_16    0x9e
#define SCSI_OP_REPORT_LUNS             0xa0
#define SCSI_OP_MAINTENANCE_IN          0xa3
#define SCSI_OP_READ_12                 0xa8
#define SCSI_OP_WRITE_12                0xaa
#define SCSI_OP_VERIFY_12               0xaf

/* Service actions (CDB byte 1, bits 4..0). */
#define SCSI_SA_MASK                    0x1f
#define SCSI_SAI_READ_CAPACITY_16       0x10   /* of SERVICE ACTION IN(16) */
#define SCSI_MI_REPORT_SUPPORTED_OPCODES 0x0c  /* of MAINTENANCE IN */

/* The last byte of every CDB is CONTROL; NACA asks for ACA handling. */
#define SCSI_CONTROL_NACA               0x04

/* ------------------------------------------------------------------------ */
/* CDB fields                                                                */

/* INQUIRY: byte 1. */
#define SCSI_INQUIRY_EVPD               0x01
#define SCSI_INQUIRY_CMDDT              0x02   /* obsolete since SPC-3 */

/* READ/WRITE/VERIFY (10/12/16), WRITE SAME, byte 1. */
#define SCSI_CDB_PROTECT_MASK           0xe0   /* RD/WR/VRPROTECT */
#define SCSI_CDB_DPO                    0x10
#define SCSI_CDB_FUA                    0x08
#define SCSI_VERIFY_BYTCHK_MASK         0x06   /* VERIFY: 2 bits */
#define SCSI_VERIFY_BYTCHK_SHIFT        1
#define SCSI_VERIFY_BYTCHK_NONE         0      /* check the medium only */
#define SCSI_VERIFY_BYTCHK_ALL          1      /* compare with data-out */
#define SCSI_VERIFY_BYTCHK_ONE          3      /* one block, repeated */
#define SCSI_READ6_LBA_MASK             0x1f   /* READ(6)/WRITE(6) byte 1 */

/* WRITE SAME (10/16), byte 1. */
#define SCSI_WRITE_SAME_ANCHOR          0x10
#define SCSI_WRITE_SAME_UNMAP           0x08
#define SCSI_WRITE_SAME_OBSOLETE        0x06   /* PBDATA, LBDATA */
#define SCSI_WRITE_SAME_NDOB            0x01   /* (16) only: no data-out */

/* UNMAP, byte 1. */
#define SCSI_UNMAP_ANCHOR               0x01

/* SYNCHRONIZE CACHE (10/16), byte 1. */
#define SCSI_SYNC_CACHE_IMMED           0x02

/* READ CAPACITY(10), byte 8 (obsolete in SBC-4). */
#define SCSI_READ_CAPACITY_PMI          0x01

/* MODE SENSE (6/10). */
#define SCSI_MODE_SENSE_DBD             0x08   /* byte 1 */
#define SCSI_MODE_SENSE_LLBAA           0x10   /* byte 1, (10) only */
#define SCSI_MODE_SENSE_PC_SHIFT        6      /* byte 2, bits 7..6 */
#define SCSI_MODE_SENSE_PAGE_MASK       0x3f   /* byte 2, bits 5..0 */

/* Page control values. */
#define SCSI_PC_CURRENT                 0
#define SCSI_PC_CHANGEABLE              1
#define SCSI_PC_DEFAULT                 2
#define SCSI_PC_SAVED                   3

/* MODE SELECT (6/10), byte 1. */
#define SCSI_MODE_SELECT_PF             0x10
#define SCSI_MODE_SELECT_SP             0x01

/* REQUEST SENSE, byte 1. */
#define SCSI_REQUEST_SENSE_DESC         0x01

/* START STOP UNIT. */
#define SCSI_START_STOP_IMMED           0x01   /* byte 1 */
#define SCSI_START_STOP_POWER_SHIFT     4      /* byte 4, bits 7..4 */
#define SCSI_START_STOP_NO_FLUSH        0x04   /* byte 4 */
#define SCSI_START_STOP_LOEJ            0x02
#define SCSI_START_STOP_START           0x01

/* PREVENT ALLOW MEDIUM REMOVAL, byte 4. */
#define SCSI_PREVENT_MASK               0x03

/* ------------------------------------------------------------------------ */
/* Sense data                                                                */

/* Response codes (byte 0, bits 6..0). */
#define SCSI_SENSE_FIXED_CURRENT        0x70
#define SCSI_SENSE_FIXED_DEFERRED       0x71
#define SCSI_SENSE_DESC_CURRENT         0x72
#define SCSI_SENSE_DESC_DEFERRED        0x73
#define SCSI_SENSE_VALID                0x80   /* fixed: INFORMATION valid */

/* Fixed format: 18 bytes; the additional length (byte 7) is 10. */
#define SCSI_SENSE_FIXED_LEN            18
#define SCSI_SENSE_FIXED_INFO           3      /* 4-byte INFORMATION */
#define SCSI_SENSE_FIXED_ADD_LEN        7
#define SCSI_SENSE_FIXED_ASC            12
#define SCSI_SENSE_FIXED_ASCQ           13
/* Descriptor format: an 8-byte header, then descriptors. */
#define SCSI_SENSE_DESC_HDR_LEN         8
#define SCSI_SENSE_DESC_ADD_LEN         7
/* The information descriptor: type 0, 12 bytes, 8-byte INFORMATION at 4. */
#define SCSI_SENSE_DESC_TYPE_INFO       0x00
#define SCSI_SENSE_DESC_INFO_LEN        12

/* Sense keys. */
#define SCSI_SENSE_NO_SENSE             0x0
#define SCSI_SENSE_RECOVERED_ERROR      0x1
#define SCSI_SENSE_NOT_READY            0x2
#define SCSI_SENSE_MEDIUM_ERROR         0x3
#define SCSI_SENSE_HARDWARE_ERROR       0x4
#define SCSI_SENSE_ILLEGAL_REQUEST      0x5
#define SCSI_SENSE_UNIT_ATTENTION       0x6
#define SCSI_SENSE_DATA_PROTECT         0x7
#define SCSI_SENSE_BLANK_CHECK          0x8
#define SCSI_SENSE_ABORTED_COMMAND      0xb
#define SCSI_SENSE_MISCOMPARE           0xe

/* Additional sense code and qualifier pairs (ASC, ASCQ). */
#define SCSI_ASC_NO_ADDITIONAL_SENSE            0x00
#define SCSI_ASCQ_NO_ADDITIONAL_SENSE           0x00
#define SCSI_ASC_WRITE_ERROR                    0x0c
#define SCSI_ASCQ_WRITE_ERROR                   0x00
#define SCSI_ASC_UNRECOVERED_READ_ERROR         0x11
#define SCSI_ASCQ_UNRECOVERED_READ_ERROR        0x00
#define SCSI_ASC_PARAMETER_LIST_LENGTH_ERROR    0x1a
#define SCSI_ASCQ_PARAMETER_LIST_LENGTH_ERROR   0x00
#define SCSI_ASC_MISCOMPARE_DURING_VERIFY       0x1d
#define SCSI_ASCQ_MISCOMPARE_DURING_VERIFY      0x00
#define SCSI_ASC_INVALID_OPCODE                 0x20
#define SCSI_ASCQ_INVALID_OPCODE                0x00
#define SCSI_ASC_LBA_OUT_OF_RANGE               0x21
#define SCSI_ASCQ_LBA_OUT_OF_RANGE              0x00
#define SCSI_ASC_INVALID_FIELD_IN_CDB           0x24
#define SCSI_ASCQ_INVALID_FIELD_IN_CDB          0x00
#define SCSI_ASC_LUN_NOT_SUPPORTED              0x25
#define SCSI_ASCQ_LUN_NOT_SUPPORTED             0x00
#define SCSI_ASC_INVALID_FIELD_IN_PARAM_LIST    0x26
#define SCSI_ASCQ_INVALID_FIELD_IN_PARAM_LIST   0x00
#define SCSI_ASC_WRITE_PROTECTED                0x27
#define SCSI_ASCQ_WRITE_PROTECTED               0x00
#define SCSI_ASCQ_SPACE_ALLOC_FAILED_WRITE_PROTECT 0x07   /* ASC 0x27 */
#define SCSI_ASC_RESET_OCCURRED                 0x29
#define SCSI_ASCQ_POWER_ON_RESET_OCCURRED       0x00  /* power on, reset or
                                                       * bus device reset */
#define SCSI_ASCQ_BUS_DEVICE_RESET_OCCURRED     0x03
#define SCSI_ASCQ_I_T_NEXUS_LOSS_OCCURRED       0x07
#define SCSI_ASC_PARAMETERS_CHANGED             0x2a
#define SCSI_ASCQ_MODE_PARAMETERS_CHANGED       0x01
#define SCSI_ASCQ_CAPACITY_DATA_CHANGED         0x09
#define SCSI_ASC_SAVING_PARAMS_NOT_SUPPORTED    0x39
#define SCSI_ASCQ_SAVING_PARAMS_NOT_SUPPORTED   0x00
#define SCSI_ASC_TARGET_CHANGED                 0x3f
#define SCSI_ASCQ_INQUIRY_DATA_CHANGED          0x03
#define SCSI_ASCQ_REPORTED_LUNS_DATA_CHANGED    0x0e
#define SCSI_ASC_INTERNAL_TARGET_FAILURE        0x44
#define SCSI_ASCQ_INTERNAL_TARGET_FAILURE       0x00

/* ------------------------------------------------------------------------ */
/* INQUIRY data                                                              */

/* Byte 0: peripheral qualifier (bits 7..5) and device type (bits 4..0). */
#define SCSI_PDT_DIRECT_ACCESS          0x00   /* a disk */
#define SCSI_PQ_NOT_CONNECTED           0x20   /* qualifier 1 */
#define SCSI_PQ_NO_DEVICE               0x60   /* qualifier 3: no LUN */
#define SCSI_INQUIRY_NO_LUN             0x7f   /* qualifier 3, type 0x1f */

#define SCSI_INQUIRY_VERSION_SPC4       0x06   /* byte 2 */
#define SCSI_INQUIRY_RDF                0x02   /* byte 3, bits 3..0 */
#define SCSI_INQUIRY_HISUP              0x10   /* byte 3 */
#define SCSI_INQUIRY_CMDQUE             0x02   /* byte 7 */

/* Standard data: 36 bytes; ASCII fields, left-aligned, space-padded. */
#define SCSI_INQUIRY_STD_LEN            36
#define SCSI_INQUIRY_VENDOR_OFF         8
#define SCSI_INQUIRY_VENDOR_LEN         8
#define SCSI_INQUIRY_PRODUCT_OFF        16
#define SCSI_INQUIRY_PRODUCT_LEN        16
#define SCSI_INQUIRY_REVISION_OFF       32
#define SCSI_INQUIRY_REVISION_LEN       4

/* Vital product data pages. */
#define SCSI_VPD_SUPPORTED_PAGES        0x00
#define SCSI_VPD_UNIT_SERIAL_NUMBER     0x80
#define SCSI_VPD_DEVICE_IDENTIFICATION  0x83
#define SCSI_VPD_BLOCK_LIMITS           0xb0
#define SCSI_VPD_BLOCK_DEV_CHARS        0xb1
#define SCSI_VPD_LB_PROVISIONING        0xb2

/* Every VPD page: 4-byte header, the length (bytes 2..3) excludes it. */
#define SCSI_VPD_HDR_LEN                4

/* Device identification designators: a 4-byte header, then the value. */
#define SCSI_DESIG_HDR_LEN              4
#define SCSI_DESIG_CODE_SET_BINARY      0x1    /* byte 0, bits 3..0 */
#define SCSI_DESIG_CODE_SET_ASCII       0x2
#define SCSI_DESIG_ASSOC_LU             0x00   /* byte 1, bits 5..4 */
#define SCSI_DESIG_TYPE_T10_VENDOR      0x1    /* byte 1, bits 3..0 */
#define SCSI_DESIG_TYPE_EUI64           0x2
#define SCSI_DESIG_TYPE_NAA             0x3
#define SCSI_NAA_IEEE_REGISTERED        0x5    /* top 4 bits of an NAA name */

/* Block limits (0xB0): page length 0x3C, byte offsets. */
#define SCSI_VPD_BL_PAGE_LEN            0x3c
#define SCSI_VPD_BL_WSNZ                4      /* bit 0 */
#define SCSI_VPD_BL_OPT_XFER_GRAN       6      /* 2 bytes, blocks */
#define SCSI_VPD_BL_MAX_XFER            8      /* 4 bytes, blocks */
#define SCSI_VPD_BL_OPT_XFER            12     /* 4 bytes, blocks */
#define SCSI_VPD_BL_MAX_UNMAP_LBAS      20     /* 4 bytes */
#define SCSI_VPD_BL_MAX_UNMAP_DESCS     24     /* 4 bytes */
#define SCSI_VPD_BL_OPT_UNMAP_GRAN      28     /* 4 bytes, blocks */
#define SCSI_VPD_BL_UNMAP_GRAN_ALIGN    32     /* 4 bytes; bit 31: UGAVALID */
#define SCSI_VPD_BL_MAX_WRITE_SAME      36     /* 8 bytes, blocks */

/* Block device characteristics (0xB1): page length 0x3C. */
#define SCSI_VPD_BDC_PAGE_LEN           0x3c
#define SCSI_VPD_BDC_ROTATION_RATE      4      /* 2 bytes */
#define SCSI_ROTATION_NON_ROTATING      0x0001

/* Logical block provisioning (0xB2): page length 4. */
#define SCSI_VPD_LBP_PAGE_LEN           4
#define SCSI_VPD_LBP_FLAGS              5      /* byte with the bits below */
#define SCSI_VPD_LBP_LBPU               0x80   /* UNMAP supported */
#define SCSI_VPD_LBP_LBPWS              0x40   /* WRITE SAME(16) unmaps */
#define SCSI_VPD_LBP_LBPWS10            0x20   /* WRITE SAME(10) unmaps */
#define SCSI_VPD_LBP_LBPRZ              0x04   /* unmapped blocks read 0 */
#define SCSI_VPD_LBP_TYPE               6      /* bits 2..0 */
#define SCSI_PROV_TYPE_FULL             0x0    /* or not reported */
#define SCSI_PROV_TYPE_THIN             0x2

/* ------------------------------------------------------------------------ */
/* READ CAPACITY                                                             */

#define SCSI_READ_CAPACITY_10_LEN       8
#define SCSI_READ_CAPACITY_16_LEN       32
#define SCSI_READ_CAPACITY_16_LBPME     0x80   /* byte 14 */
#define SCSI_READ_CAPACITY_16_LBPRZ     0x40   /* byte 14 */

/* ------------------------------------------------------------------------ */
/* Mode parameters                                                           */

#define SCSI_MODE_HDR6_LEN              4
#define SCSI_MODE_HDR10_LEN             8
#define SCSI_MODE_DEVSPEC_WP            0x80   /* device-specific parameter */
#define SCSI_MODE_DEVSPEC_DPOFUA        0x10
#define SCSI_MODE_HDR10_LONGLBA         0x01   /* (10) header byte 4 */
#define SCSI_MODE_BLKDESC_LEN           8      /* short block descriptor */
#define SCSI_MODE_BLKDESC_LONG_LEN      16     /* long LBA block descriptor */

/* Page byte 0: PS (bit 7), SPF (bit 6), page code (bits 5..0). */
#define SCSI_MODE_PAGE_PS               0x80
#define SCSI_MODE_PAGE_SPF              0x40
#define SCSI_MODE_PAGE_CODE_MASK        0x3f

#define SCSI_MODE_PAGE_CACHING          0x08
#define SCSI_MODE_PAGE_CONTROL          0x0a
#define SCSI_MODE_PAGE_ALL              0x3f
#define SCSI_MODE_SUBPAGE_ALL           0xff

/* Caching page: 20 bytes; byte 2 holds WCE. */
#define SCSI_MODE_CACHING_LEN           20
#define SCSI_MODE_CACHING_WCE           0x04   /* byte 2 */
#define SCSI_MODE_CACHING_RCD           0x01   /* byte 2 */

/* Control page: 12 bytes; byte 2 holds D_SENSE. */
#define SCSI_MODE_CONTROL_LEN           12
#define SCSI_MODE_CONTROL_D_SENSE       0x04   /* byte 2 */
#define SCSI_MODE_CONTROL_QAM_UNRESTRICTED 0x10 /* byte 3, bits 7..4 = 1 */

/* ------------------------------------------------------------------------ */
/* Parameter lists                                                           */

/* UNMAP: 8-byte header, then 16-byte descriptors (8-byte LBA, 4-byte
 * count, 4 reserved). */
#define SCSI_UNMAP_HDR_LEN              8
#define SCSI_UNMAP_DESC_LEN             16

/* REPORT LUNS: 8-byte header (4-byte LUN list length), 8 bytes a LUN. */
#define SCSI_REPORT_LUNS_HDR_LEN        8
#define SCSI_REPORT_LUNS_ENTRY_LEN      8
/* Single-level LUNs: peripheral (< 256) or flat space addressing. */
#define SCSI_LUN_FLAT_SPACE             0x40
#define SCSI_LUN_FLAT_MAX               0x3fff

#endif
