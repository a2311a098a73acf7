/** Shapes shared inside the frontend that are not generated from the server models. */
import { ServerConfig } from './models';

/** What GET /j2c/api/config answers. */
export type IServerInfo = ServerConfig;
