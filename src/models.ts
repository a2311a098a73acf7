/* Placeholder until `python -m j2c_server.schema_export` generates this file. */
export interface ServerConfig {
  version: string;
  storage_kind: string;
  scheduler_kinds: string[];
  default_scheduler: string;
  default_image: string | null;
  images: { name: string; image: string; description?: string | null }[];
  compression_level: number;
  root_dir_name?: string | null;
}
